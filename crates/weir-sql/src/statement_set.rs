//! Statement sets: several INSERTs run as one job, in Flink's three spellings.
//!
//! - `EXECUTE STATEMENT SET BEGIN INSERT …; INSERT …; END;` (a script's, and Flink's API's);
//! - `BEGIN STATEMENT SET; INSERT …; INSERT …; END;` (Flink's SQL client);
//! - `EXPLAIN STATEMENT SET BEGIN INSERT …; … END;`.
//!
//! The `;` inside a set split it into several pieces when the script was cut into statements;
//! here the pieces are put back together into one [`Statement::StatementSet`]. A `BEGIN
//! STATEMENT SET` whose `END` is not in the same text (the shell runs each statement as it is
//! typed) stays a [`Statement::BeginStatementSet`], and a lone `END` an
//! [`Statement::EndStatementSet`]: the engine collects the INSERTs between them.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_core::{Result, WeirError};

use crate::parser::{location, parse_statement, ParsedStatement, Statement};

/// One statement's tokens (no `;`, no surrounding whitespace) and text, as cut from a script.
pub(crate) struct Piece {
    pub(crate) tokens: Vec<TokenWithSpan>,
    pub(crate) text: String,
}

/// How a piece starts a statement set, and the index of its first token after those words.
enum Opening {
    Execute(usize),
    Explain(usize),
    Client,
}

/// The unquoted words the tokens start with (whitespace skipped), upper-cased, up to `n`,
/// each with the index of the token after it.
fn leading_words(tokens: &[TokenWithSpan], n: usize) -> Vec<(String, usize)> {
    let mut words = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match &t.token {
            Token::Whitespace(_) => continue,
            Token::Word(w) if w.quote_style.is_none() && words.len() < n => {
                words.push((w.value.to_ascii_uppercase(), i + 1));
            }
            _ => break,
        }
        if words.len() == n {
            break;
        }
    }
    words
}

fn opening(tokens: &[TokenWithSpan]) -> Option<Opening> {
    let words = leading_words(tokens, 4);
    let spelled: Vec<&str> = words.iter().map(|(w, _)| w.as_str()).collect();
    let after = |k: usize| words.get(k - 1).map_or(0, |(_, i)| *i);
    match spelled.as_slice() {
        ["EXECUTE", "STATEMENT", "SET", "BEGIN"] => Some(Opening::Execute(after(4))),
        ["EXPLAIN", "STATEMENT", "SET", "BEGIN"] => Some(Opening::Explain(after(4))),
        ["BEGIN", "STATEMENT", "SET"] if words.len() == 3 && rest_is_empty(tokens, after(3)) => Some(Opening::Client),
        _ => None,
    }
}

fn rest_is_empty(tokens: &[TokenWithSpan], from: usize) -> bool {
    tokens[from.min(tokens.len())..].iter().all(|t| matches!(t.token, Token::Whitespace(_)))
}

fn is_end(tokens: &[TokenWithSpan]) -> bool {
    let words = leading_words(tokens, 2);
    words.len() == 1 && words[0].0 == "END" && rest_is_empty(tokens, words[0].1)
}

/// The statement a piece holds after its opening words (the first INSERT of an `EXECUTE
/// STATEMENT SET BEGIN INSERT …`); `None` when nothing follows them.
fn remainder(tokens: &[TokenWithSpan], from: usize) -> Result<Option<ParsedStatement>> {
    let rest: Vec<TokenWithSpan> =
        tokens[from..].iter().skip_while(|t| matches!(t.token, Token::Whitespace(_))).cloned().collect();
    if rest.is_empty() {
        return Ok(None);
    }
    let text: String = rest.iter().map(|t| t.token.to_string()).collect();
    parse_statement(rest, text).map(Some)
}

/// A statement of a set: an INSERT, or a refusal at its position.
fn member(statement: ParsedStatement) -> Result<ParsedStatement> {
    match statement.statement {
        Statement::Insert(_) => Ok(statement),
        _ => Err(WeirError::user(
            "a statement set holds INSERT statements only (END closes it and runs the INSERTs as one job)",
        )
        .at(Some(statement.location))),
    }
}

/// Parse a script's pieces, putting each statement set back together.
pub(crate) fn parse_pieces(pieces: Vec<Piece>) -> Result<Vec<ParsedStatement>> {
    let mut out = Vec::new();
    let mut pieces = pieces.into_iter().peekable();
    while let Some(piece) = pieces.next() {
        let Some(first) = piece.tokens.first() else { continue };
        let start = location(first.span.start);
        let Some(kind) = opening(&piece.tokens) else {
            let statement = match is_end(&piece.tokens) {
                true => ParsedStatement {
                    statement: Statement::EndStatementSet,
                    text: piece.text,
                    location: start,
                    tokens: piece.tokens,
                },
                false => parse_statement(piece.tokens, piece.text)?,
            };
            out.push(statement);
            continue;
        };
        let mut members = Vec::new();
        if let Opening::Execute(from) | Opening::Explain(from) = kind {
            members.extend(remainder(&piece.tokens, from)?.map(member).transpose()?);
        }
        let mut text = piece.text.clone();
        let mut closed = false;
        for next in pieces.by_ref() {
            text.push_str(";\n");
            text.push_str(&next.text);
            if is_end(&next.tokens) {
                closed = true;
                break;
            }
            members.push(member(parse_statement(next.tokens, next.text)?)?);
        }
        if !closed {
            match kind {
                // The shell: the engine collects what follows, up to the END.
                Opening::Client => {
                    out.push(ParsedStatement {
                        statement: Statement::BeginStatementSet,
                        text: piece.text,
                        location: start,
                        tokens: piece.tokens,
                    });
                    out.extend(members);
                    continue;
                }
                _ => return Err(WeirError::user("this statement set has no END: close it with END;").at(Some(start))),
            }
        }
        if members.is_empty() {
            return Err(WeirError::user("this statement set is empty: put INSERT statements between BEGIN and END")
                .at(Some(start)));
        }
        let set = ParsedStatement {
            statement: Statement::StatementSet(members),
            text: text.clone(),
            location: start,
            tokens: piece.tokens.clone(),
        };
        let statement = match kind {
            Opening::Explain(_) => Statement::Explain(Box::new(set)),
            _ => set.statement,
        };
        out.push(ParsedStatement { statement, text, location: start, tokens: piece.tokens });
    }
    Ok(out)
}
