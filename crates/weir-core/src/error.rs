//! Errors that say whose fault they are: the user's (SQL, settings, input data), something
//! outside Weir (files, network), or Weir's own (a bug).

use std::fmt;

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;

pub type Result<T, E = WeirError> = std::result::Result<T, E>;

/// Whose fault an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The user can fix it: a SQL or setting error, or malformed input data.
    User,
    /// Something outside Weir failed: a file, a disk, the network.
    External,
    /// A bug in Weir.
    Internal,
    /// Another instance of the same job has taken over (its checkpoints, its Kafka
    /// transactions): this one must stop, not restart, or the two would fence each other in
    /// turn.
    Fenced,
}

impl ErrorKind {
    /// The kind as metrics and the REST API label it.
    pub fn name(&self) -> &'static str {
        match self {
            ErrorKind::User => "user",
            ErrorKind::External => "external",
            ErrorKind::Internal => "internal",
            ErrorKind::Fenced => "fenced",
        }
    }
}

/// A 1-based position in the SQL text the user gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

#[derive(Debug, Clone)]
pub struct WeirError {
    pub kind: ErrorKind,
    pub message: String,
    pub location: Option<Location>,
}

impl WeirError {
    pub fn user(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::User, message: message.into(), location: None }
    }
    pub fn external(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::External, message: message.into(), location: None }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Internal, message: message.into(), location: None }
    }
    pub fn fenced(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Fenced, message: message.into(), location: None }
    }
    /// A feature Weir does not have yet: always refused at planning time.
    pub fn not_supported(what: impl fmt::Display) -> Self {
        Self::user(format!("not supported: {what}"))
    }
    /// Attach a position unless a more precise one is already there.
    pub fn at(mut self, location: Option<Location>) -> Self {
        if self.location.is_none() {
            self.location = location;
        }
        self
    }
    /// Prefix the message with what was being done, keeping kind and location.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for WeirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(loc) = self.location {
            write!(f, " (at {loc})")?;
        }
        Ok(())
    }
}

impl std::error::Error for WeirError {}

impl From<DataFusionError> for WeirError {
    fn from(e: DataFusionError) -> Self {
        let mut error = Self::from_datafusion(e);
        // Weir has one catalog and one schema; DataFusion's default names for them are noise.
        error.message = error.message.replace("datafusion.public.", "");
        // One line: DataFusion puts hints ("Did you mean …?") on lines of their own.
        error.message = error.message.lines().map(str::trim).collect::<Vec<_>>().join(" ");
        error
    }
}

impl WeirError {
    fn from_datafusion(e: DataFusionError) -> Self {
        match e {
            DataFusionError::Plan(m) | DataFusionError::Configuration(m) => Self::user(m),
            DataFusionError::Diagnostic(d, inner) => {
                let loc = d.span.map(|s| Location { line: s.start.line, column: s.start.column });
                WeirError::from_datafusion(*inner).at(loc)
            }
            DataFusionError::Context(c, inner) => WeirError::from_datafusion(*inner).context(c),
            DataFusionError::SchemaError(..) | DataFusionError::SQL(..) => Self::user(e.strip_backtrace()),
            DataFusionError::NotImplemented(m) => Self::not_supported(one_line_refusal(&m)),
            DataFusionError::Shared(inner) => Self::internal(inner.strip_backtrace()),
            DataFusionError::IoError(e) => Self::external(e.to_string()),
            DataFusionError::ArrowError(a, _) => WeirError::from(*a),
            DataFusionError::External(e) => match e.downcast::<WeirError>() {
                Ok(w) => *w,
                Err(e) => Self::external(e.to_string()),
            },
            DataFusionError::Execution(m) => Self::user(m),
            other => Self::internal(other.strip_backtrace()),
        }
    }
}

/// DataFusion's refusals of syntax it does not plan carry a dump of the syntax tree
/// (`Unsupported ast node MatchRecognize { table: … }`). The user gets the construct's SQL
/// name instead (`MATCH_RECOGNIZE`), which the planner then finds in the statement's tokens to
/// give it a position.
fn one_line_refusal(message: &str) -> String {
    let cut = |text: &str| -> String {
        let end = text.find(['{', '(', '[']).unwrap_or(text.len());
        text[..end].trim().to_string()
    };
    if let Some(rest) = message.strip_prefix("Unsupported ast node ") {
        // CamelCase to SQL's spelling: MatchRecognize -> MATCH_RECOGNIZE.
        let node = cut(rest);
        let mut sql = String::with_capacity(node.len() + 4);
        for (i, c) in node.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                sql.push('_');
            }
            sql.push(c.to_ascii_uppercase());
        }
        return sql;
    }
    if message.contains(" { ") || message.len() > 300 {
        return cut(message);
    }
    message.to_string()
}

impl From<ArrowError> for WeirError {
    fn from(e: ArrowError) -> Self {
        match e {
            ArrowError::IoError(m, _) => Self::external(m),
            ArrowError::ExternalError(e) => match e.downcast::<WeirError>() {
                Ok(w) => *w,
                Err(e) => Self::external(e.to_string()),
            },
            // Cast and parse failures come from data or from a query the user wrote.
            ArrowError::CastError(m)
            | ArrowError::ParseError(m)
            | ArrowError::InvalidArgumentError(m)
            | ArrowError::ComputeError(m) => Self::user(m),
            ArrowError::DivideByZero => Self::user("division by zero"),
            other => Self::internal(other.to_string()),
        }
    }
}
