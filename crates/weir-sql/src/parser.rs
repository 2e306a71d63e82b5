//! Statements in Flink's SQL dialect.
//!
//! A script is tokenized once, so that every position, in any statement, is a line and column
//! of the whole script. It is split into statements at top-level `;`. Statements that Flink
//! has and sqlparser does not (`CREATE TABLE … WITH (…)` with `WATERMARK FOR`, `SET 'k' = 'v'`,
//! `SHOW JOBS`, …) are parsed here with sqlparser's parser primitives; queries and `INSERT`
//! are parsed by sqlparser itself.

use datafusion::sql::sqlparser::ast::{DataType, Expr, Ident, ObjectName, Query, Statement as SqlStatement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Location as SqlLocation, Token, TokenWithSpan, Tokenizer};
use weir_core::{Location, Result, WeirError};

use crate::statement_set::Piece;

mod create_table;
mod explain_and_jobs;
mod rewrites;

/// One statement of a script.
#[derive(Debug, Clone)]
pub struct ParsedStatement {
    pub statement: Statement,
    /// The statement's own text, without the `;`.
    pub text: String,
    /// Where it starts in the script.
    pub location: Location,
    /// Its tokens, with script positions: used to place errors found while planning.
    pub tokens: Vec<TokenWithSpan>,
}

#[derive(Debug, Clone)]
pub enum Statement {
    CreateTable(Box<CreateTable>),
    CreateView {
        name: Ident,
        query: Box<Query>,
        or_replace: bool,
        if_not_exists: bool,
        query_text: String,
    },
    Drop {
        kind: ObjectKind,
        name: Ident,
        if_exists: bool,
    },
    /// `ALTER TABLE [IF EXISTS] t SET (…) | RESET (…) | RENAME TO u`.
    AlterTable {
        name: Ident,
        if_exists: bool,
        action: AlterTable,
    },
    ShowTables,
    ShowViews,
    /// `SHOW FUNCTIONS`: the functions queries can call.
    ShowFunctions,
    ShowJobs,
    /// `SHOW JOB 'name'` or `SHOW JOB id`.
    ShowJob {
        job: String,
    },
    /// `SHOW CHECKPOINTS 'name'`: the job's completed checkpoints.
    ShowCheckpoints {
        job: String,
    },
    ShowCreate {
        kind: ObjectKind,
        name: Ident,
    },
    Describe {
        name: Ident,
    },
    /// `SET` alone lists the settings.
    Set {
        key: Option<(String, Location)>,
        value: Option<String>,
    },
    Reset {
        key: Option<String>,
    },
    Explain(Box<ParsedStatement>),
    /// `EXPLAIN UPGRADE [FROM 'path'] <INSERT or statement set>`: what becomes of each part
    /// of the state of a checkpoint (the job's latest, or the one at `path`) in the new plan.
    ExplainUpgrade {
        from: Option<(String, Location)>,
        inner: Box<ParsedStatement>,
    },
    /// `STOP JOB 'name' [WITH SAVEPOINT] [WITH DRAIN]`.
    StopJob {
        job: String,
        savepoint: bool,
        drain: bool,
    },
    /// A bare `SELECT` (or `VALUES`, `WITH …`): rows go back to the caller.
    Query(Box<SqlStatement>),
    /// `INSERT INTO t SELECT …`: starts a job.
    Insert(Box<SqlStatement>),
    /// `CREATE TABLE t WITH (…) AS SELECT …`: the table, with the query's columns, then the
    /// `INSERT INTO t SELECT …` (an `Insert`) that fills it.
    CreateTableAs {
        table: Box<CreateTable>,
        insert: Box<ParsedStatement>,
    },
    /// INSERTs run as one job, each table they read scanned once (`EXECUTE STATEMENT SET
    /// BEGIN … END`, or `BEGIN STATEMENT SET; … END;` in one script). Each is an `Insert`.
    StatementSet(Vec<ParsedStatement>),
    /// `BEGIN STATEMENT SET` whose `END` is yet to come (typed in the shell): the INSERTs
    /// that follow are collected until `END`.
    BeginStatementSet,
    /// `END` of a statement set begun earlier.
    EndStatementSet,
}

#[derive(Debug, Clone)]
pub enum AlterTable {
    Set(Vec<(String, String, Location)>),
    Reset(Vec<(String, Location)>),
    Rename(Ident),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Table,
    View,
}

#[derive(Debug, Clone)]
pub struct CreateTable {
    pub name: Ident,
    pub if_not_exists: bool,
    pub columns: Vec<ColumnDef>,
    pub watermark: Option<(Ident, Expr)>,
    pub primary_key: Vec<Ident>,
    pub partitioned_by: Vec<Ident>,
    pub options: Vec<(String, String, Location)>,
    /// `LIKE source (…)`: the table is merged with another's definition.
    pub like: Option<LikeClause>,
}

/// `LIKE source [(INCLUDING ALL, OVERWRITING OPTIONS, …)]` in `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct LikeClause {
    pub source: Ident,
    pub options: Vec<(LikeStrategy, LikeFeature, Location)>,
    /// Where `LIKE` stands.
    pub location: Location,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeStrategy {
    Including,
    Excluding,
    Overwriting,
}

/// What of the source table a `LIKE` option is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LikeFeature {
    All,
    Constraints,
    Generated,
    Metadata,
    Options,
    Partitions,
    Watermarks,
}

impl LikeFeature {
    pub const EACH: [LikeFeature; 6] = [
        LikeFeature::Constraints,
        LikeFeature::Generated,
        LikeFeature::Metadata,
        LikeFeature::Options,
        LikeFeature::Partitions,
        LikeFeature::Watermarks,
    ];

    fn named(word: &str) -> Option<Self> {
        Some(match word.to_ascii_uppercase().as_str() {
            "ALL" => LikeFeature::All,
            "CONSTRAINTS" => LikeFeature::Constraints,
            "GENERATED" => LikeFeature::Generated,
            "METADATA" => LikeFeature::Metadata,
            "OPTIONS" => LikeFeature::Options,
            "PARTITIONS" => LikeFeature::Partitions,
            "WATERMARKS" => LikeFeature::Watermarks,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            LikeFeature::All => "ALL",
            LikeFeature::Constraints => "CONSTRAINTS",
            LikeFeature::Generated => "GENERATED",
            LikeFeature::Metadata => "METADATA",
            LikeFeature::Options => "OPTIONS",
            LikeFeature::Partitions => "PARTITIONS",
            LikeFeature::Watermarks => "WATERMARKS",
        }
    }

    /// Features that are one thing (a key, a partitioning, everything): included or not.
    fn not_overwritten(self) -> bool {
        matches!(self, LikeFeature::All | LikeFeature::Constraints | LikeFeature::Partitions)
    }
}

#[derive(Debug, Clone)]
pub struct ColumnDef {
    pub name: Ident,
    pub data_type: DataType,
    pub not_null: bool,
    pub location: Location,
    /// `METADATA [FROM 'key'] [VIRTUAL]`: filled by the connector, not read from the record's
    /// value (the key, defaulting to the column's name).
    pub metadata: Option<String>,
    /// `METADATA … VIRTUAL`: read, never written by a sink.
    pub virtual_metadata: bool,
    /// `name AS expression`: a computed column (its `data_type` is then unspecified, the
    /// expression's type).
    pub computed: Option<Expr>,
}

pub fn location(l: SqlLocation) -> Location {
    Location { line: l.line, column: l.column }
}

/// A sqlparser error with its position taken out of the message text.
pub fn parser_error(e: ParserError) -> WeirError {
    let text = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => "statement nested too deeply".to_string(),
    };
    // sqlparser appends " at Line: L, Column: C".
    if let Some(at) = text.rfind(" at Line: ") {
        let pos = &text[at + " at Line: ".len()..];
        if let Some((line, col)) = pos.split_once(", Column: ") {
            if let (Ok(line), Ok(column)) = (line.trim().parse(), col.trim().parse()) {
                return WeirError::user(format!("SQL syntax error: {}", &text[..at]))
                    .at(Some(Location { line, column }));
            }
        }
    }
    WeirError::user(format!("SQL syntax error: {text}"))
}

/// Byte offsets of each line start, to cut statement texts out of the script.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines(starts)
    }

    fn offset(&self, text: &str, at: SqlLocation) -> usize {
        let Some(&start) = self.0.get((at.line as usize).saturating_sub(1)) else { return text.len() };
        text[start..].char_indices().nth((at.column as usize).saturating_sub(1)).map_or(text.len(), |(i, _)| start + i)
    }
}

/// Split a script into statements and parse each.
pub fn parse_script(text: &str) -> Result<Vec<ParsedStatement>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| WeirError::user(format!("SQL syntax error: {}", e.message)).at(Some(location(e.location))))?;
    let lines = Lines::new(text);
    let mut pieces = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    for token in tokens.into_iter().chain(std::iter::once(TokenWithSpan::wrap(Token::SemiColon))) {
        if token.token == Token::SemiColon {
            // Keep inner whitespace (the parser skips it; texts are rebuilt from it).
            let mut meaningful: Vec<_> = std::mem::take(&mut current);
            // A table hint (`/*+ OPTIONS(…) */`) is a comment that counts, even last.
            while meaningful
                .last()
                .is_some_and(|t| matches!(t.token, Token::Whitespace(_)) && !crate::hints::is_hint(&t.token))
            {
                meaningful.pop();
            }
            let lead = meaningful.iter().take_while(|t| matches!(t.token, Token::Whitespace(_))).count();
            meaningful.drain(..lead);
            if let (Some(first), Some(last)) = (meaningful.first(), meaningful.last()) {
                let start = lines.offset(text, first.span.start);
                let end = lines.offset(text, last.span.end).max(start);
                pieces.push(Piece { tokens: meaningful, text: text[start..end].to_string() });
            }
        } else {
            current.push(token);
        }
    }
    crate::statement_set::parse_pieces(pieces)
}

/// Parse one statement from its tokens (no `;`).
pub fn parse_statement(tokens: Vec<TokenWithSpan>, text: String) -> Result<ParsedStatement> {
    let tokens = crate::collections::rewrite(tokens)?;
    let tokens = crate::predicates::rewrite(crate::json_construct::rewrite(tokens)?)?;
    let tokens = crate::match_recognize::syntax::rewrite(crate::named_args::rewrite(tokens)?)?;
    let tokens = rewrites::rewrite_temporal_tables(rewrites::rewrite_window_tvfs(crate::hints::rewrite(tokens)?)?)?;
    let dialect = GenericDialect {};
    let start = tokens.first().map(|t| location(t.span.start)).unwrap_or(Location { line: 1, column: 1 });
    let mut p = Parser::new(&dialect).with_tokens_with_locations(tokens.clone());
    let statement =
        StatementParser { p: &mut p, tokens: &tokens, text: &text }.parse().map_err(|e| e.at(Some(start)))?;
    Ok(ParsedStatement { statement, text, location: start, tokens })
}

struct StatementParser<'a, 'p> {
    p: &'a mut Parser<'p>,
    tokens: &'a [TokenWithSpan],
    text: &'a str,
}

impl StatementParser<'_, '_> {
    /// The next token is the unquoted word `word` (keywords sqlparser lacks, like WATERMARK).
    fn word(&mut self, word: &str) -> bool {
        match &self.p.peek_token().token {
            Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word) => {
                self.p.next_token();
                true
            }
            _ => false,
        }
    }

    fn expect_word(&mut self, word: &str) -> Result<()> {
        if self.word(word) {
            Ok(())
        } else {
            let found = self.p.peek_token();
            Err(parser_error(self.p.expected::<()>(word, found).unwrap_err()))
        }
    }

    fn here(&self) -> Location {
        location(self.p.peek_token().span.start)
    }

    fn end(&mut self) -> Result<()> {
        let t = self.p.peek_token();
        if t.token == Token::EOF {
            Ok(())
        } else {
            Err(parser_error(self.p.expected::<()>("end of statement", t).unwrap_err()))
        }
    }

    fn ident(&mut self) -> Result<Ident> {
        self.p.parse_identifier().map_err(parser_error)
    }

    /// A single-part name (Weir has one catalog and one database).
    fn name(&mut self) -> Result<Ident> {
        let at = self.here();
        let name: ObjectName = self.p.parse_object_name(false).map_err(parser_error)?;
        let mut parts: Vec<Ident> = name.0.into_iter().filter_map(|p| p.as_ident().cloned()).collect();
        if parts.len() != 1 {
            return Err(WeirError::not_supported("qualified names (catalog.database.table)").at(Some(at)));
        }
        Ok(parts.remove(0))
    }

    /// The tokens not parsed yet: the statement inside an `EXPLAIN`.
    fn rest(&self) -> Vec<TokenWithSpan> {
        self.tokens[self.p.index()..]
            .iter()
            .skip_while(|t| matches!(t.token, Token::Whitespace(_)))
            .filter(|t| t.token != Token::EOF)
            .cloned()
            .collect()
    }

    fn string(&mut self) -> Result<(String, Location)> {
        let at = self.here();
        Ok((self.p.parse_literal_string().map_err(parser_error)?, at))
    }

    fn parse(mut self) -> Result<Statement> {
        let p = &mut *self.p;
        if p.parse_keyword(Keyword::CREATE) {
            let or_replace = p.parse_keywords(&[Keyword::OR, Keyword::REPLACE]);
            let _temporary = p.parse_keyword(Keyword::TEMPORARY);
            if p.parse_keyword(Keyword::TABLE) {
                if or_replace {
                    return Err(WeirError::not_supported("CREATE OR REPLACE TABLE").at(Some(self.here())));
                }
                return self.create_table();
            }
            if p.parse_keyword(Keyword::VIEW) {
                return self.create_view(or_replace);
            }
            return Err(WeirError::not_supported(format!(
                "CREATE {}: Weir creates TABLE and VIEW",
                p.peek_token().token
            ))
            .at(Some(self.here())));
        }
        if p.parse_keyword(Keyword::DROP) {
            let _temporary = p.parse_keyword(Keyword::TEMPORARY);
            let kind = self.object_kind()?;
            let if_exists = self.p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            let name = self.name()?;
            self.end()?;
            return Ok(Statement::Drop { kind, name, if_exists });
        }
        if p.parse_keyword(Keyword::ALTER) {
            return self.alter();
        }
        if p.parse_keyword(Keyword::SHOW) {
            let statement = if self.p.parse_keyword(Keyword::TABLES) {
                Statement::ShowTables
            } else if self.p.parse_keyword(Keyword::VIEWS) {
                Statement::ShowViews
            } else if self.p.parse_keyword(Keyword::FUNCTIONS) {
                Statement::ShowFunctions
            } else if self.word("JOBS") {
                Statement::ShowJobs
            } else if self.word("JOB") || self.word("CHECKPOINTS") {
                let checkpoints = matches!(&self.tokens.get(self.p.index().saturating_sub(1)).map(|t| &t.token), Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("CHECKPOINTS"));
                let job = match self.p.next_token().token {
                    Token::SingleQuotedString(s) => s,
                    Token::Number(n, _) => n,
                    Token::Word(w) => w.value,
                    other => {
                        return Err(WeirError::user(format!("SHOW JOB needs a job name or id, not {other}"))
                            .at(Some(self.here())))
                    }
                };
                if checkpoints {
                    Statement::ShowCheckpoints { job }
                } else {
                    Statement::ShowJob { job }
                }
            } else if self.p.parse_keyword(Keyword::CREATE) {
                let kind = self.object_kind()?;
                Statement::ShowCreate { kind, name: self.name()? }
            } else {
                let t = self.p.peek_token();
                return Err(parser_error(
                    self.p
                        .expected::<()>("TABLES, VIEWS, FUNCTIONS, JOBS, JOB, CHECKPOINTS or CREATE after SHOW", t)
                        .unwrap_err(),
                ));
            };
            self.end()?;
            return Ok(statement);
        }
        if p.parse_keyword(Keyword::DESCRIBE) || p.parse_keyword(Keyword::DESC) {
            let name = self.name()?;
            self.end()?;
            return Ok(Statement::Describe { name });
        }
        if p.parse_keyword(Keyword::SET) {
            if self.p.peek_token().token == Token::EOF {
                return Ok(Statement::Set { key: None, value: None });
            }
            let key = self.string()?;
            self.p.expect_token(&Token::Eq).map_err(parser_error)?;
            let (value, _) = self.string()?;
            self.end()?;
            return Ok(Statement::Set { key: Some(key), value: Some(value) });
        }
        if p.parse_keyword(Keyword::RESET) {
            let key = if self.p.peek_token().token == Token::EOF { None } else { Some(self.string()?.0) };
            self.end()?;
            return Ok(Statement::Reset { key });
        }
        if p.parse_keyword(Keyword::EXPLAIN) {
            return self.explain();
        }
        if self.word("STOP") {
            return self.stop_job();
        }
        let statement = self.p.parse_statement().map_err(parser_error)?;
        self.end()?;
        match statement {
            SqlStatement::Query(_) => Ok(Statement::Query(Box::new(statement))),
            SqlStatement::Insert(_) => Ok(Statement::Insert(Box::new(statement))),
            other => {
                let keyword = other.to_string().split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                Err(WeirError::not_supported(format!("the statement {keyword} …")))
            }
        }
    }

    /// After `ALTER`: `TABLE [IF EXISTS] t` and one action.
    fn alter(&mut self) -> Result<Statement> {
        if !self.p.parse_keyword(Keyword::TABLE) {
            let at = self.here();
            return Err(WeirError::not_supported(format!("ALTER {}: Weir alters tables", self.p.peek_token().token))
                .at(Some(at)));
        }
        let if_exists = self.p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = self.name()?;
        let at = self.here();
        let action = if self.p.parse_keyword(Keyword::SET) {
            self.p.expect_token(&Token::LParen).map_err(parser_error)?;
            let mut options = Vec::new();
            loop {
                let (key, at) = self.string()?;
                self.p.expect_token(&Token::Eq).map_err(parser_error)?;
                options.push((key, self.string()?.0, at));
                if !self.p.consume_token(&Token::Comma) {
                    break;
                }
            }
            self.p.expect_token(&Token::RParen).map_err(parser_error)?;
            AlterTable::Set(options)
        } else if self.p.parse_keyword(Keyword::RESET) {
            self.p.expect_token(&Token::LParen).map_err(parser_error)?;
            let mut keys = vec![self.string()?];
            while self.p.consume_token(&Token::Comma) {
                keys.push(self.string()?);
            }
            self.p.expect_token(&Token::RParen).map_err(parser_error)?;
            AlterTable::Reset(keys)
        } else if self.p.parse_keywords(&[Keyword::RENAME, Keyword::TO]) {
            AlterTable::Rename(self.name()?)
        } else {
            let found = self.p.peek_token().token;
            return Err(WeirError::not_supported(format!(
                "ALTER TABLE … {found}: Weir's ALTER TABLE sets and resets options and renames tables"
            ))
            .at(Some(at)));
        };
        self.end()?;
        Ok(Statement::AlterTable { name, if_exists, action })
    }

    fn object_kind(&mut self) -> Result<ObjectKind> {
        if self.p.parse_keyword(Keyword::TABLE) {
            Ok(ObjectKind::Table)
        } else if self.p.parse_keyword(Keyword::VIEW) {
            Ok(ObjectKind::View)
        } else {
            let t = self.p.peek_token();
            Err(parser_error(self.p.expected::<()>("TABLE or VIEW", t).unwrap_err()))
        }
    }

    fn create_view(&mut self, or_replace: bool) -> Result<Statement> {
        let if_not_exists = self.p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = self.name()?;
        // `CREATE VIEW v (a, b) AS …` names the query's columns.
        let columns = if self.p.consume_token(&Token::LParen) {
            let columns = self.p.parse_comma_separated(|p| p.parse_identifier()).map_err(parser_error)?;
            self.p.expect_token(&Token::RParen).map_err(parser_error)?;
            columns
        } else {
            Vec::new()
        };
        self.p.expect_keyword_is(Keyword::AS).map_err(parser_error)?;
        let query_start = self.p.index();
        let mut query = self.p.parse_query().map_err(parser_error)?;
        self.end()?;
        let mut query_text = tokens_text(&self.tokens[query_start..]);
        if !columns.is_empty() {
            let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
            query_text = format!("SELECT * FROM ({query_text}) AS __weir_view ({})", names.join(", "));
            query = Parser::new(&GenericDialect {})
                .try_with_sql(&query_text)
                .and_then(|mut p| p.parse_query())
                .map_err(parser_error)?;
        }
        Ok(Statement::CreateView { name, query, or_replace, if_not_exists, query_text })
    }
}

/// The text of some tokens, as they were written.
fn tokens_text(tokens: &[TokenWithSpan]) -> String {
    tokens.iter().filter(|t| t.token != Token::EOF).map(|t| t.token.to_string()).collect::<String>().trim().to_string()
}

/// Where identifier `name` first occurs among `tokens`: places errors that DataFusion reports
/// without a position.
pub fn find_identifier(tokens: &[TokenWithSpan], name: &str) -> Option<Location> {
    tokens.iter().find_map(|t| match &t.token {
        Token::Word(w) if w.value.eq_ignore_ascii_case(name) => Some(location(t.span.start)),
        _ => None,
    })
}

/// Whether `text` ends with a complete statement (a top-level `;` as its last token): the
/// REPL reads more lines until it does. Unterminated strings or comments are incomplete.
pub fn ends_statement(text: &str) -> bool {
    let dialect = GenericDialect {};
    match Tokenizer::new(&dialect, text).tokenize() {
        Ok(tokens) => {
            let mut meaningful = tokens.iter().filter(|t| !matches!(t, Token::Whitespace(_)));
            let words: Vec<&Token> = meaningful.by_ref().take(4).collect();
            let mut last = tokens.iter().rev().filter(|t| !matches!(t, Token::Whitespace(_)));
            let ends = last.next() == Some(&Token::SemiColon);
            // `EXECUTE STATEMENT SET BEGIN …` and `EXPLAIN STATEMENT SET BEGIN …` end at `END;`.
            let spelled = |w: [&str; 4]| words.len() == 4 && words.iter().zip(w).all(|(t, w)| is_word(t, w));
            if spelled(["EXECUTE", "STATEMENT", "SET", "BEGIN"]) || spelled(["EXPLAIN", "STATEMENT", "SET", "BEGIN"]) {
                return ends && last.next().is_some_and(|t| is_word(t, "END"));
            }
            ends
        }
        Err(_) => false,
    }
}

fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_splits_into_statements_with_their_places() {
        let script = "CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\n\n  SELECT a FROM t; -- done\n";
        let parsed = parse_script(script).expect("a script");
        assert_eq!(parsed.len(), 2);
        assert!(matches!(parsed[0].statement, Statement::CreateTable(_)));
        assert!(matches!(parsed[1].statement, Statement::Query(_)));
        assert_eq!(parsed[1].text, "SELECT a FROM t");
        assert_eq!((parsed[1].location.line, parsed[1].location.column), (3, 3));
    }

    #[test]
    fn a_syntax_error_names_its_line_and_column() {
        let e = parse_script("SELECT 1;\nSELECT 'open").expect_err("an unterminated string");
        let at = e.location.expect("a location");
        assert_eq!((at.line, at.column), (2, 8), "{e}");
        let e = parse_script("SELECT 1;\nCREATE TABLE (a INT)").expect_err("no table name");
        assert_eq!(e.location.map(|l| l.line), Some(2), "{e}");
    }
}
