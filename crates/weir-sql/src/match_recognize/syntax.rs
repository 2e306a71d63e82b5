//! What sqlparser does not parse of Flink's `MATCH_RECOGNIZE`: reluctant quantifiers
//! (`B*?`, `B+?`, `B{1,3}?`) and the `WITHIN INTERVAL '…' unit` clause after `PATTERN (…)`.
//!
//! The token rewrite takes them out and hands them to the planner inside the statement, as
//! a first measure `'<extras>' AS __weir_mr` ([`Extras`]): the planner sees the clause
//! whole, wherever it sits (a view, a subquery), without a side channel.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_core::{Result, WeirError};

use crate::parser::location;

/// The measure name that carries [`Extras`].
pub const EXTRAS: &str = "__weir_mr";

/// What the rewrite took out of one `MATCH_RECOGNIZE`.
#[derive(Debug, Default, PartialEq)]
pub struct Extras {
    /// For each quantifier of the pattern, left to right: reluctant (`?` after it).
    pub reluctant: Vec<bool>,
    /// `WITHIN`, in milliseconds.
    pub within: Option<i64>,
}

impl Extras {
    pub fn encode(&self) -> String {
        let reluctant: String = self.reluctant.iter().map(|r| if *r { '1' } else { '0' }).collect();
        let within = self.within.map(|w| w.to_string()).unwrap_or_default();
        format!("{reluctant};{within}")
    }

    pub fn decode(text: &str) -> Option<Extras> {
        let mut parts = text.split(';');
        let reluctant = parts.next()?.chars().map(|c| c == '1').collect();
        let within = match parts.next()? {
            "" => None,
            w => Some(w.parse().ok()?),
        };
        Some(Extras { reluctant, within })
    }
}

fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn is_question(t: &Token) -> bool {
    matches!(t, Token::Placeholder(p) if p == "?")
}

/// Rewrite every `MATCH_RECOGNIZE ( … )` of a statement's tokens.
pub fn rewrite(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    // Once per statement: a statement planned again (EXPLAIN) comes back rewritten.
    if !tokens.iter().any(|t| is_word(&t.token, "MATCH_RECOGNIZE")) || tokens.iter().any(|t| is_word(&t.token, EXTRAS))
    {
        return Ok(tokens);
    }
    let mut out = Vec::with_capacity(tokens.len() + 8);
    let mut i = 0;
    while i < tokens.len() {
        if is_word(&tokens[i].token, "MATCH_RECOGNIZE") {
            i = clause(&tokens, i, &mut out)?;
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    Ok(out)
}

/// The next meaningful token at or after `i`.
fn next(tokens: &[TokenWithSpan], mut i: usize) -> usize {
    while tokens.get(i).is_some_and(|t| matches!(t.token, Token::Whitespace(_))) {
        i += 1;
    }
    i
}

/// One clause from its `MATCH_RECOGNIZE` token at `start`: copied to `out` with the extras
/// taken out and carried as a measure. Returns where the clause ends.
fn clause(tokens: &[TokenWithSpan], start: usize, out: &mut Vec<TokenWithSpan>) -> Result<usize> {
    let mut extras = Extras::default();
    let mut body: Vec<TokenWithSpan> = Vec::new();
    let mut depth = 0usize;
    let mut i = start;
    let mut measures_at: Option<usize> = None;
    let mut first_keyword_at: Option<usize> = None;
    while i < tokens.len() {
        let t = &tokens[i];
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    body.push(t.clone());
                    i += 1;
                    break;
                }
            }
            _ => {}
        }
        if depth == 1 && is_word(&t.token, "MEASURES") {
            measures_at = Some(body.len() + 1);
        }
        if depth == 1
            && first_keyword_at.is_none()
            && ["ONE", "ALL", "AFTER", "PATTERN"].iter().any(|w| is_word(&t.token, w))
        {
            first_keyword_at = Some(body.len());
        }
        if depth == 1 && is_word(&t.token, "PATTERN") {
            body.push(t.clone());
            i = pattern(tokens, i + 1, &mut body, &mut extras)?;
            continue;
        }
        body.push(t.clone());
        i += 1;
    }
    let span = tokens[start].span;
    let with_span = |token: Token| TokenWithSpan { token, span };
    let carried = [
        with_span(Token::SingleQuotedString(extras.encode())),
        with_span(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space)),
        with_span(Token::make_keyword("AS")),
        with_span(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space)),
        with_span(Token::make_word(EXTRAS, None)),
    ];
    match (measures_at, first_keyword_at) {
        (Some(at), _) => {
            let mut items =
                vec![with_span(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space))];
            items.extend(carried);
            items.push(with_span(Token::Comma));
            body.splice(at..at, items);
        }
        (None, Some(at)) => {
            let mut items = vec![with_span(Token::make_keyword("MEASURES"))];
            items.push(with_span(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space)));
            items.extend(carried);
            items.push(with_span(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space)));
            body.splice(at..at, items);
        }
        // No PATTERN: sqlparser says what it expected.
        (None, None) => {}
    }
    out.extend(body);
    Ok(i)
}

/// `( pattern ) [WITHIN INTERVAL 'n' unit]` from `i`: copied to `body` without the reluctant
/// marks and the `WITHIN`, which go to `extras`. Returns the index after it.
fn pattern(
    tokens: &[TokenWithSpan],
    mut i: usize,
    body: &mut Vec<TokenWithSpan>,
    extras: &mut Extras,
) -> Result<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    let mut last_quantifier_end = false;
    let mut in_braces = false;
    while i < tokens.len() {
        let t = &tokens[i];
        match &t.token {
            Token::LParen => {
                depth += 1;
                opened = true;
            }
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        // `?` right after a quantifier marks it reluctant; any other `?` is the quantifier.
        if is_question(&t.token) && last_quantifier_end {
            if let Some(r) = extras.reluctant.last_mut() {
                *r = true;
            }
            last_quantifier_end = false;
            i += 1;
            continue;
        }
        last_quantifier_end = false;
        match &t.token {
            Token::LBrace => in_braces = true,
            Token::RBrace => {
                in_braces = false;
                extras.reluctant.push(false);
                last_quantifier_end = true;
            }
            Token::Mul | Token::Plus if !in_braces => {
                extras.reluctant.push(false);
                last_quantifier_end = true;
            }
            tok if is_question(tok) => {
                extras.reluctant.push(false);
                last_quantifier_end = true;
            }
            _ => {}
        }
        body.push(t.clone());
        i += 1;
        if opened && depth == 0 {
            break;
        }
    }
    let w = next(tokens, i);
    if !tokens.get(w).is_some_and(|t| is_word(&t.token, "WITHIN")) {
        return Ok(i);
    }
    let place = Some(location(tokens[w].span.start));
    let bad = || {
        WeirError::user(
            "WITHIN takes an interval: WITHIN INTERVAL '10' SECOND (MILLISECOND, SECOND, MINUTE, HOUR or DAY)",
        )
        .at(place)
    };
    let interval = next(tokens, w + 1);
    if !tokens.get(interval).is_some_and(|t| is_word(&t.token, "INTERVAL")) {
        return Err(bad());
    }
    let value = next(tokens, interval + 1);
    let Some(Token::SingleQuotedString(amount)) = tokens.get(value).map(|t| &t.token) else { return Err(bad()) };
    let unit = next(tokens, value + 1);
    let Some(Token::Word(unit_word)) = tokens.get(unit).map(|t| &t.token) else { return Err(bad()) };
    let per = match unit_word.value.to_ascii_uppercase().as_str() {
        "MILLISECOND" | "MILLISECONDS" => 1.0,
        "SECOND" | "SECONDS" => 1_000.0,
        "MINUTE" | "MINUTES" => 60_000.0,
        "HOUR" | "HOURS" => 3_600_000.0,
        "DAY" | "DAYS" => 86_400_000.0,
        _ => return Err(bad()),
    };
    let amount: f64 = amount.trim().parse().map_err(|_| bad())?;
    let ms = (amount * per).round();
    if !(ms > 0.0 && ms < i64::MAX as f64) {
        return Err(WeirError::user("WITHIN takes a positive interval").at(place));
    }
    extras.within = Some(ms as i64);
    Ok(unit + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn rewritten(sql: &str) -> String {
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().expect("tokens");
        rewrite(tokens).expect("rewrite").iter().map(|t| t.token.to_string()).collect()
    }

    #[test]
    fn reluctant_marks_and_within_become_a_measure() {
        let sql = "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES A.x AS ax PATTERN (A B*? C{1,2}? D?) \
                   WITHIN INTERVAL '10' SECOND DEFINE A AS A.x > 1)";
        assert_eq!(
            rewritten(sql),
            "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES '110;10000' AS __weir_mr, A.x AS ax \
             PATTERN (A B* C{1,2} D?) DEFINE A AS A.x > 1)"
        );
    }

    #[test]
    fn a_clause_without_measures_gets_them() {
        let sql = "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE A AS A.x > 1)";
        assert_eq!(
            rewritten(sql),
            "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES ';' AS __weir_mr PATTERN (A B) DEFINE A AS A.x > 1)"
        );
        assert_eq!(Extras::decode("110;10000").map(|e| e.within), Some(Some(10_000)));
    }
}
