//! Flink's map constructor, `MAP[k1, v1, k2, v2, …]`, which sqlparser does not read (its
//! generic dialect takes DuckDB's `MAP {k: v}`). It is rewritten token by token into
//! DataFusion's `map(make_array(k1, k2, …), make_array(v1, v2, …))`; positions stay those of
//! the original tokens. (`ARRAY[…]` and `ROW(…)` are read as they are.)

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_core::{Result, WeirError};

use crate::parser::location;

fn is_map(t: &Token) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("MAP"))
}

/// Rewrite every `MAP[…]` of a statement's tokens (nested ones included).
pub fn rewrite(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    if !tokens.iter().any(|t| is_map(&t.token)) {
        return Ok(tokens);
    }
    let mut out = Vec::with_capacity(tokens.len() + 8);
    let mut i = 0;
    while i < tokens.len() {
        let next = (i + 1..tokens.len()).find(|&j| !matches!(tokens[j].token, Token::Whitespace(_)));
        let opens = next.is_some_and(|j| tokens[j].token == Token::LBracket);
        if !(is_map(&tokens[i].token) && opens) {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        let open = next.unwrap_or(i);
        let span = tokens[i].span;
        // The arguments: top-level commas split them, up to the matching `]`.
        let mut depth = 0usize;
        let mut args: Vec<Vec<TokenWithSpan>> = vec![Vec::new()];
        let mut end = None;
        for (j, t) in tokens.iter().enumerate().skip(open + 1) {
            match &t.token {
                Token::LBracket | Token::LParen | Token::LBrace => depth += 1,
                Token::RBracket if depth == 0 => {
                    end = Some(j);
                    break;
                }
                Token::RBracket | Token::RParen | Token::RBrace => depth = depth.saturating_sub(1),
                Token::Comma if depth == 0 => {
                    args.push(Vec::new());
                    continue;
                }
                _ => {}
            }
            if let Some(last) = args.last_mut() {
                last.push(t.clone());
            }
        }
        let Some(end) = end else {
            return Err(WeirError::user("MAP[ without its closing ]").at(Some(location(span.start))));
        };
        if args.len() % 2 != 0 || args.iter().all(|a| a.iter().all(|t| matches!(t.token, Token::Whitespace(_)))) {
            return Err(WeirError::user("MAP[…] takes keys and values in pairs: MAP['k1', v1, 'k2', v2]")
                .at(Some(location(span.start))));
        }
        let word = |w: &str| TokenWithSpan::new(Token::make_word(w, None), span);
        let punct = |t: Token| TokenWithSpan::new(t, span);
        out.push(word("map"));
        out.push(punct(Token::LParen));
        for half in 0..2 {
            if half == 1 {
                out.push(punct(Token::Comma));
            }
            out.push(word("make_array"));
            out.push(punct(Token::LParen));
            for (n, arg) in args.iter().skip(half).step_by(2).enumerate() {
                if n > 0 {
                    out.push(punct(Token::Comma));
                }
                // Nested maps inside an argument are rewritten too.
                out.extend(rewrite(arg.clone())?);
            }
            out.push(punct(Token::RParen));
        }
        out.push(punct(Token::RParen));
        i = end + 1;
    }
    Ok(out)
}
