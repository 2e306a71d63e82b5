//! Flink's named arguments of the window table functions, `TUMBLE(DATA => TABLE t,
//! TIMECOL => DESCRIPTOR(ts), SIZE => INTERVAL '10' MINUTES)`, put in the positional order the
//! window rewrite reads, token by token (positions stay the original tokens'). `DATA` comes
//! first, as Flink requires; the others in any order.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_core::{Result, WeirError};

use crate::parser::location;

/// Each function's parameters in positional order.
const PARAMETERS: [(&str, &[&str]); 4] = [
    ("TUMBLE", &["DATA", "TIMECOL", "SIZE", "OFFSET"]),
    ("HOP", &["DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"]),
    ("CUMULATE", &["DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"]),
    ("SESSION", &["DATA", "TIMECOL", "GAP"]),
];

fn word(t: &Token) -> Option<String> {
    match t {
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    }
}

fn meaningful(tokens: &[TokenWithSpan], from: usize) -> Option<usize> {
    (from..tokens.len()).find(|&j| !matches!(tokens[j].token, Token::Whitespace(_)))
}

/// Rewrite every window function called with named arguments.
pub fn rewrite(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    if !tokens.iter().any(|t| t.token == Token::RArrow) {
        return Ok(tokens);
    }
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let params = word(&tokens[i].token).and_then(|w| PARAMETERS.iter().find(|(f, _)| *f == w).map(|(_, p)| *p));
        let open = meaningful(&tokens, i + 1).filter(|&j| tokens[j].token == Token::LParen);
        let named = open
            .and_then(|o| meaningful(&tokens, o + 1))
            .and_then(|n| meaningful(&tokens, n + 1).map(|a| (n, a)))
            .is_some_and(|(n, a)| word(&tokens[n].token).is_some() && tokens[a].token == Token::RArrow);
        let (Some(params), Some(open), true) = (params, open, named) else {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        };
        let at = |k: usize| Some(location(tokens[k].span.start));
        // The arguments, split at top-level commas up to the closing parenthesis.
        let mut depth = 0usize;
        let mut args: Vec<Vec<usize>> = vec![Vec::new()];
        let mut close = None;
        for k in open + 1..tokens.len() {
            match tokens[k].token {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => {
                    close = Some(k);
                    break;
                }
                Token::RParen => depth -= 1,
                Token::Comma if depth == 0 => {
                    args.push(Vec::new());
                    continue;
                }
                _ => {}
            }
            if let Some(a) = args.last_mut() {
                a.push(k);
            }
        }
        let Some(close) = close else {
            return Err(WeirError::user("a window function's ( without its closing )").at(at(i)));
        };
        let mut by_name: Vec<Option<Vec<usize>>> = vec![None; params.len()];
        for (n, arg) in args.iter().enumerate() {
            let toks: Vec<usize> =
                arg.iter().copied().filter(|&k| !matches!(tokens[k].token, Token::Whitespace(_))).collect();
            let (Some(&name_at), Some(&arrow)) = (toks.first(), toks.get(1)) else {
                return Err(WeirError::user("a window function mixes named and positional arguments").at(at(i)));
            };
            let name = word(&tokens[name_at].token).unwrap_or_default();
            if tokens[arrow].token != Token::RArrow {
                return Err(WeirError::user("a window function mixes named and positional arguments").at(at(name_at)));
            }
            let Some(slot) = params.iter().position(|p| *p == name) else {
                return Err(WeirError::user(format!(
                    "unknown argument {name} of the window function (it takes {})",
                    params.join(", ")
                ))
                .at(at(name_at)));
            };
            if (n == 0) != (slot == 0) {
                return Err(WeirError::user("DATA must be the window function's first argument").at(at(name_at)));
            }
            if by_name[slot].replace(toks[2..].to_vec()).is_some() {
                return Err(WeirError::user(format!("argument {name} given twice")).at(at(name_at)));
            }
        }
        // Positional up to the last given; a gap before it has no positional spelling.
        let last = by_name.iter().rposition(Option::is_some).unwrap_or(0);
        out.extend(tokens[i..=open].iter().cloned());
        for (slot, value) in by_name.iter().enumerate().take(last + 1) {
            let Some(value) = value else {
                return Err(
                    WeirError::user(format!("the window function needs its argument {}", params[slot])).at(at(i))
                );
            };
            if slot > 0 {
                out.push(TokenWithSpan::new(Token::Comma, tokens[open].span));
            }
            out.extend(value.iter().map(|&k| tokens[k].clone()));
        }
        out.push(tokens[close].clone());
        i = close + 1;
    }
    Ok(out)
}
