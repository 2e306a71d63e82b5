//! Flink SQL that sqlparser does not read, rewritten token by token before it parses:
//! window table functions and `FOR SYSTEM_TIME AS OF` joins. Positions stay those of the
//! original tokens, so errors still point into the user's text.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_core::Result;

use super::*;

const WINDOW_TVFS: &[&str] = &["TUMBLE", "HOP", "CUMULATE", "SESSION"];

/// Flink's window table functions, `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))`, are not
/// SQL that sqlparser reads (`TABLE t` and `DESCRIPTOR(ts)` as arguments). They are rewritten
/// token by token into a call of Weir's table function with the table and column names as
/// strings: `__weir_tumble('t', 'ts', size)`; `SESSION(TABLE t PARTITION BY k, …)` passes the
/// keys as a third string. Positions stay those of the original tokens.
pub(super) fn rewrite_window_tvfs(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let meaningful: Vec<usize> =
        (0..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_))).collect();
    let at = |k: usize| meaningful.get(k).map(|&i| &tokens[i]);
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut k = 0;
    let mut copied_to = 0; // tokens[..copied_to] are in `out`
    while k < meaningful.len() {
        let kind = match (at(k), at(k + 1), at(k + 2), at(k + 3), at(k + 4)) {
            (Some(t0), Some(t1), Some(t2), Some(t3), Some(t4))
                if is_word(&t0.token, "TABLE")
                    && t1.token == Token::LParen
                    && t3.token == Token::LParen
                    && is_word(&t4.token, "TABLE") =>
            {
                WINDOW_TVFS.iter().find(|w| is_word(&t2.token, w)).map(|w| w.to_ascii_lowercase())
            }
            _ => None,
        };
        let Some(kind) = kind else {
            k += 1;
            continue;
        };
        let span_of = |k: usize| at(k).map(|t| t.span).unwrap_or(tokens[meaningful[0]].span);
        let name_of = |t: &TokenWithSpan| match &t.token {
            Token::Word(w) if w.quote_style.is_some() => Some(w.value.clone()),
            Token::Word(w) => Some(w.value.clone()),
            _ => None,
        };
        let err = |k: usize, what: &str| {
            WeirError::user(format!("SQL syntax error: {} window function: expected {what}", kind.to_uppercase()))
                .at(Some(location(span_of(k).start)))
        };
        // TABLE ( KIND ( TABLE name [PARTITION BY a, b] , DESCRIPTOR ( col ) rest… ) )
        let table = at(k + 5).and_then(name_of).ok_or_else(|| err(k + 5, "a table name after TABLE"))?;
        let mut j = k + 6;
        let mut keys = Vec::new();
        if at(j).is_some_and(|t| is_word(&t.token, "PARTITION")) && at(j + 1).is_some_and(|t| is_word(&t.token, "BY")) {
            j += 2;
            loop {
                keys.push(at(j).and_then(name_of).ok_or_else(|| err(j, "a column name after PARTITION BY"))?);
                j += 1;
                if at(j).is_some_and(|t| t.token == Token::Comma)
                    && !at(j + 1).is_some_and(|t| is_word(&t.token, "DESCRIPTOR"))
                {
                    j += 1;
                    continue;
                }
                break;
            }
        }
        if at(j).is_none_or(|t| t.token != Token::Comma) || !at(j + 1).is_some_and(|t| is_word(&t.token, "DESCRIPTOR"))
        {
            return Err(err(j, ", DESCRIPTOR(time column)"));
        }
        if at(j + 2).is_none_or(|t| t.token != Token::LParen) || at(j + 4).is_none_or(|t| t.token != Token::RParen) {
            return Err(err(j + 2, "DESCRIPTOR(time column)"));
        }
        let column = at(j + 3).and_then(name_of).ok_or_else(|| err(j + 3, "a column name in DESCRIPTOR"))?;
        // The remaining arguments run to the function's closing parenthesis.
        let rest_start = j + 5;
        let mut depth = 0i32;
        let mut end = rest_start;
        loop {
            match at(end).map(|t| &t.token) {
                None => return Err(err(end, "a closing parenthesis")),
                Some(Token::LParen) => depth += 1,
                Some(Token::RParen) if depth == 0 => break,
                Some(Token::RParen) => depth -= 1,
                _ => {}
            }
            end += 1;
        }
        if at(end + 1).is_none_or(|t| t.token != Token::RParen) {
            return Err(err(end + 1, "the closing parenthesis of TABLE("));
        }
        // Copy what came before, then the rewritten call.
        out.extend(tokens[copied_to..meaningful[k]].iter().cloned());
        let with_span = |token: Token, k: usize| TokenWithSpan { token, span: span_of(k) };
        out.push(with_span(Token::make_word(&format!("__weir_{kind}"), None), k + 2));
        out.push(with_span(Token::LParen, k + 3));
        out.push(with_span(Token::SingleQuotedString(table), k + 5));
        out.push(with_span(Token::Comma, j));
        out.push(with_span(Token::SingleQuotedString(column), j + 3));
        if kind == "session" {
            out.push(with_span(Token::Comma, j));
            out.push(with_span(Token::SingleQuotedString(keys.join(",")), j));
        } else if !keys.is_empty() {
            return Err(err(k + 6, "no PARTITION BY (only SESSION windows are partitioned)"));
        }
        // `, size …)` as written (whitespace included), then skip the outer `)`.
        out.extend(tokens[meaningful[rest_start]..=meaningful[end]].iter().cloned());
        copied_to = meaningful[end + 1] + 1;
        k = end + 2;
    }
    out.extend(tokens[copied_to..].iter().cloned());
    Ok(out)
}

/// Flink's temporal table syntax, `JOIN t FOR SYSTEM_TIME AS OF o.ts [AS] x`, is not SQL
/// that sqlparser's generic dialect reads. It is rewritten token by token into a call of
/// Weir's table function, `__weir_temporal('t', 'o.ts')`, which the planner turns into a
/// lookup join (processing time) or a versioned join (event time).
pub(super) fn rewrite_temporal_tables(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let meaningful: Vec<usize> =
        (0..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_))).collect();
    let at = |k: usize| meaningful.get(k).map(|&i| &tokens[i]);
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut copied_to = 0;
    let mut k = 1;
    while k + 4 < meaningful.len() {
        let starts = ["FOR", "SYSTEM_TIME", "AS", "OF"]
            .iter()
            .enumerate()
            .all(|(d, w)| at(k + d).is_some_and(|t| is_word(&t.token, w)));
        let Some(Token::Word(table)) = at(k - 1).map(|t| &t.token).filter(|_| starts) else {
            k += 1;
            continue;
        };
        let table = table.value.clone();
        // The time attribute: a column, maybe qualified (`o.ts`).
        let mut parts = Vec::new();
        let mut j = k + 4;
        loop {
            match at(j).map(|t| &t.token) {
                Some(Token::Word(w)) => parts.push(w.value.clone()),
                _ => {
                    let place = at(j).map(|t| location(t.span.start));
                    return Err(WeirError::user(format!(
                        "FOR SYSTEM_TIME AS OF on '{table}' takes a time attribute column (like o.order_time)"
                    ))
                    .at(place));
                }
            }
            if at(j + 1).is_some_and(|t| t.token == Token::Period) {
                j += 2;
            } else {
                break;
            }
        }
        let span = at(k - 1).map(|t| t.span).unwrap_or(tokens[meaningful[0]].span);
        out.extend(tokens[copied_to..meaningful[k - 1]].iter().cloned());
        let with_span = |token: Token| TokenWithSpan { token, span };
        out.push(with_span(Token::make_word("__weir_temporal", None)));
        out.push(with_span(Token::LParen));
        out.push(with_span(Token::SingleQuotedString(table.clone())));
        out.push(with_span(Token::Comma));
        out.push(with_span(Token::SingleQuotedString(parts.join("."))));
        out.push(with_span(Token::RParen));
        // Without an alias the table's own name qualifies its columns (`currency_rates.rate`).
        let aliased = at(j + 1).is_some_and(|t| {
            is_word(&t.token, "AS") || matches!(&t.token, Token::Word(w) if w.keyword == Keyword::NoKeyword)
        });
        if !aliased {
            out.push(with_span(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space)));
            out.push(with_span(Token::make_word("AS", None)));
            out.push(with_span(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space)));
            out.push(with_span(Token::make_word(&table, Some('`'))));
        }
        copied_to = meaningful[j] + 1;
        k = j + 2;
    }
    out.extend(tokens[copied_to..].iter().cloned());
    Ok(out)
}
