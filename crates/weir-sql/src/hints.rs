//! Flink's dynamic table options, `FROM t /*+ OPTIONS('k' = 'v', …) */`: options of one scan,
//! over the table's own, checked as its `WITH` options are.
//!
//! To sqlparser a hint is a comment. The parser rewrites the table name before one into a call
//! of Weir's table function, `__weir_hinted('t', 'k', 'v', …) AS t`, which DataFusion plans as
//! a [`HintedTable`]; the planner reads it as the table with the options merged. Another hint
//! than `OPTIONS` is ignored with a warning that names it. A hint on an `INSERT`'s table stays
//! a comment to the parser, and the planner merges its options into the sink's
//! ([`insert_options`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::Expr;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, Whitespace};
use weir_core::{Result, WeirError};

use crate::parser::location;
use crate::windows::TableSchemas;

pub const FUNCTION: &str = "__weir_hinted";

/// A table read with hinted options.
#[derive(Debug)]
pub struct HintedTable {
    pub table: String,
    pub options: Vec<(String, String)>,
    pub schema: SchemaRef,
}

crate::windows::planned_only_table!(HintedTable, datafusion::datasource::TableType::View);

#[derive(Debug)]
pub struct HintedFunction {
    pub tables: TableSchemas,
}

impl TableFunctionImpl for HintedFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let texts = args
            .exprs()
            .iter()
            .map(|e| match e {
                Expr::Literal(ScalarValue::Utf8(Some(s)), _) => Ok(s.clone()),
                other => Err(DataFusionError::Internal(format!("OPTIONS hint: unexpected {other}"))),
            })
            .collect::<DfResult<Vec<_>>>()?;
        let Some((table, pairs)) = texts.split_first() else {
            return Err(DataFusionError::Internal("OPTIONS hint without a table".into()));
        };
        let schema = self
            .tables
            .read()
            .map_err(|_| DataFusionError::Internal("table schemas lock poisoned".into()))?
            .get(table)
            .cloned()
            .ok_or_else(|| {
                DataFusionError::Plan(format!("table '{table}' not found (an OPTIONS hint is on a table)"))
            })?;
        let options = pairs.chunks(2).filter_map(|kv| Some((kv.first()?.clone(), kv.get(1)?.clone()))).collect();
        Ok(Arc::new(HintedTable { table: table.clone(), options, schema }))
    }
}

/// The `'k' = 'v'` pairs of the `OPTIONS(…)` hints in a `/*+ … */` comment's text (after
/// the `+`); other hints are named in a warning.
fn options_of(comment: &str, at: weir_core::Location) -> Result<Vec<(String, String)>> {
    let bad = |what: &str| WeirError::user(format!("table hint /*+{comment}*/: {what}")).at(Some(at));
    let tokens = Tokenizer::new(&GenericDialect {}, comment)
        .tokenize()
        .map_err(|e| bad(&e.message))?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect::<Vec<_>>();
    let mut options = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Word(name) = &tokens[i] else { return Err(bad("expected a hint name, like OPTIONS")) };
        if tokens.get(i + 1) != Some(&Token::LParen) {
            return Err(bad("expected ( after the hint's name"));
        }
        let close = tokens[i..].iter().position(|t| *t == Token::RParen).map(|p| i + p).ok_or_else(|| bad("no )"))?;
        let inner = &tokens[i + 2..close];
        if name.value.eq_ignore_ascii_case("OPTIONS") {
            for pair in inner.split(|t| *t == Token::Comma) {
                match pair {
                    [Token::SingleQuotedString(k), Token::Eq, Token::SingleQuotedString(v)] => {
                        options.push((k.clone(), v.clone()))
                    }
                    _ => return Err(bad("OPTIONS takes 'key' = 'value' pairs")),
                }
            }
        } else {
            log::warn!("table hint '{}' at {at} is not one Weir knows (OPTIONS); it is ignored", name.value);
        }
        i = close + 1;
        if tokens.get(i) == Some(&Token::Comma) {
            i += 1;
        }
    }
    Ok(options)
}

/// The options of an `INSERT INTO t /*+ OPTIONS(…) */`'s hint and where it is, if it has one.
pub fn insert_options(tokens: &[TokenWithSpan]) -> Result<Option<(Vec<(String, String)>, weir_core::Location)>> {
    let mut words = tokens.iter().filter(|t| !matches!(t.token, Token::Whitespace(_)) || is_hint(&t.token));
    while let Some(t) = words.next() {
        if !matches!(&t.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("INTO")) {
            continue;
        }
        let _table = words.next();
        return match words.next() {
            Some(TokenWithSpan { token: Token::Whitespace(Whitespace::MultiLineComment(c)), span }) => {
                let at = location(span.start);
                options_of(&c[1..], at).map(|o| Some((o, at)))
            }
            _ => Ok(None),
        };
    }
    Ok(None)
}

/// Words after a table that are not its alias.
const NOT_ALIAS: &[&str] = &[
    "WHERE",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "CROSS",
    "ON",
    "GROUP",
    "ORDER",
    "LIMIT",
    "UNION",
    "HAVING",
    "WINDOW",
    "FOR",
    "SELECT",
    "NATURAL",
    "EXCEPT",
    "INTERSECT",
    "OFFSET",
    "USING",
];

/// Whether a token is a hint comment, `/*+ … */`.
pub fn is_hint(t: &Token) -> bool {
    matches!(t, Token::Whitespace(Whitespace::MultiLineComment(c)) if c.starts_with('+'))
}

/// Rewrite each `t /*+ OPTIONS(…) */` into `__weir_hinted('t', 'k', 'v', …) AS t`.
pub fn rewrite(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    if !tokens.iter().any(|t| is_hint(&t.token)) {
        return Ok(tokens);
    }
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len() + 8);
    for (i, t) in tokens.iter().enumerate() {
        let Token::Whitespace(Whitespace::MultiLineComment(comment)) = &t.token else {
            out.push(t.clone());
            continue;
        };
        if !comment.starts_with('+') {
            out.push(t.clone());
            continue;
        }
        let at = location(t.span.start);
        let options = options_of(&comment[1..], at)?;
        // The table is the last word before the hint.
        let table_at = out.iter().rposition(|t| !matches!(t.token, Token::Whitespace(_)));
        let Some(table_at) = table_at.filter(|k| matches!(out[*k].token, Token::Word(_))) else {
            return Err(WeirError::user("a table hint /*+ … */ must follow a table's name").at(Some(at)));
        };
        let before = out[..table_at].iter().rev().find(|t| !matches!(t.token, Token::Whitespace(_)));
        let word_before = |word: &str| {
            before.is_some_and(|b| matches!(&b.token, Token::Word(w) if w.value.eq_ignore_ascii_case(word)))
        };
        if word_before("INTO") {
            // The sink's hint stays a comment to the parser; `insert_options` reads it.
            out.push(t.clone());
            continue;
        }
        if word_before("TABLE") {
            return Err(WeirError::not_supported("OPTIONS hints inside a window table function: hint a view's table")
                .at(Some(at)));
        }
        let Token::Word(table) = out[table_at].token.clone() else { continue };
        let span = out[table_at].span;
        let with_span = |token: Token| TokenWithSpan { token, span };
        out.truncate(table_at);
        out.push(with_span(Token::make_word(FUNCTION, None)));
        out.push(with_span(Token::LParen));
        out.push(with_span(Token::SingleQuotedString(table.value.clone())));
        for (k, v) in options {
            out.push(with_span(Token::Comma));
            out.push(with_span(Token::SingleQuotedString(k)));
            out.push(with_span(Token::Comma));
            out.push(with_span(Token::SingleQuotedString(v)));
        }
        out.push(with_span(Token::RParen));
        // Without an alias the table keeps its own name for qualified columns (`t.col`).
        let next = tokens[i + 1..].iter().find(|t| !matches!(t.token, Token::Whitespace(_)));
        let aliased = match next.map(|t| &t.token) {
            Some(Token::Word(w)) => {
                w.quote_style.is_some() || !NOT_ALIAS.iter().any(|k| w.value.eq_ignore_ascii_case(k))
            }
            _ => false,
        };
        if !aliased {
            out.push(with_span(Token::Whitespace(Whitespace::Space)));
            out.push(with_span(Token::make_keyword("AS")));
            out.push(with_span(Token::Whitespace(Whitespace::Space)));
            out.push(with_span(Token::Word(table)));
        }
    }
    Ok(out)
}
