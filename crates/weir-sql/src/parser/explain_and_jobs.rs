//! `EXPLAIN` (of a plan, or of an upgrade: `EXPLAIN UPGRADE [FROM 'path'] …`) and statements
//! about running jobs: `STOP JOB … [WITH SAVEPOINT]`.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use weir_core::{Result, WeirError};

use super::*;

impl StatementParser<'_, '_> {
    /// After `EXPLAIN`: the statement explained, or an upgrade.
    pub(super) fn explain(&mut self) -> Result<Statement> {
        if self.word("UPGRADE") {
            return self.explain_upgrade();
        }
        // Flink's `EXPLAIN PLAN FOR …` is `EXPLAIN …`.
        let plan_for = self.p.parse_keywords(&[Keyword::PLAN, Keyword::FOR]);
        let rest = self.rest();
        let mut inner_text = self.text.trim_start()["EXPLAIN".len()..].trim();
        if plan_for {
            inner_text = inner_text.get(4..).unwrap_or("").trim_start().get(3..).unwrap_or("").trim();
        }
        let inner_text = inner_text.to_string();
        if rest.is_empty() {
            return Err(WeirError::user("EXPLAIN needs a statement to explain").at(Some(self.here())));
        }
        let inner = parse_statement(rest, inner_text)?;
        Ok(Statement::Explain(Box::new(inner)))
    }

    /// After `STOP`: Flink's `STOP JOB '<name or id>' [WITH SAVEPOINT] [WITH DRAIN]`.
    pub(super) fn stop_job(&mut self) -> Result<Statement> {
        self.expect_word("JOB")?;
        let at = self.here();
        let job = match self.p.next_token().token {
            Token::SingleQuotedString(s) => s,
            Token::Number(n, _) => n,
            other => {
                return Err(
                    WeirError::user(format!("STOP JOB needs the job's name or id in quotes, not {other}")).at(Some(at))
                )
            }
        };
        let (mut savepoint, mut drain) = (false, false);
        while self.p.parse_keyword(Keyword::WITH) {
            let at = self.here();
            if self.word("SAVEPOINT") {
                savepoint = true;
            } else if self.word("DRAIN") {
                drain = true;
            } else {
                return Err(WeirError::user("STOP JOB … WITH takes SAVEPOINT or DRAIN").at(Some(at)));
            }
        }
        self.end()?;
        Ok(Statement::StopJob { job, savepoint, drain })
    }

    /// After `EXPLAIN UPGRADE`: `[FROM 'checkpoint or savepoint'] INSERT …` or a statement set.
    pub(super) fn explain_upgrade(&mut self) -> Result<Statement> {
        let from = match self.p.parse_keyword(Keyword::FROM) {
            true => Some(self.string()?),
            false => None,
        };
        let at = self.here();
        let rest = self.rest();
        if rest.is_empty() {
            return Err(WeirError::user("EXPLAIN UPGRADE needs an INSERT or a statement set").at(Some(at)));
        }
        let text = tokens_text(&rest);
        let inner = parse_statement(rest, text)?;
        if !matches!(inner.statement, Statement::Insert(_) | Statement::StatementSet(_)) {
            return Err(WeirError::user("EXPLAIN UPGRADE explains an INSERT or a statement set").at(Some(at)));
        }
        Ok(Statement::ExplainUpgrade { from, inner: Box::new(inner) })
    }
}
