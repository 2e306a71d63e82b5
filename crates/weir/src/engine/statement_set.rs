//! Statement sets: several INSERTs planned and checked one by one, run as one job.

use weir_core::{Location, Result};
use weir_runtime::{JobHandle, SinkTarget, StreamPlan};
use weir_sql::parser::{ParsedStatement, Statement};

use super::{Engine, State};
use crate::guarantees::Report;

impl Engine {
    /// Each INSERT of a set planned, with its position.
    pub(super) async fn plan_set(
        &self,
        state: &State,
        members: &[ParsedStatement],
    ) -> Result<Vec<(StreamPlan, Location)>> {
        let mut plans = Vec::with_capacity(members.len());
        for m in members {
            let Statement::Insert(q) = &m.statement else { continue };
            let at = Some(m.location);
            let plan = state.planner.plan(q, &m.tokens, m.location).await.map_err(|e| e.at(at))?;
            plans.push((plan, m.location));
        }
        Ok(plans)
    }

    /// Check each INSERT of a set as if it ran alone, then start them all as one job, the
    /// tables several read scanned once. One refused INSERT refuses the set: nothing starts.
    pub(super) async fn start_set(&self, state: &mut State, members: &[ParsedStatement]) -> Result<JobHandle> {
        let planned = self.plan_set(state, members).await?;
        let mut reports = Vec::with_capacity(planned.len());
        for (plan, at) in &planned {
            let report = self.check_insert(state, plan).await.map_err(|e| e.at(Some(*at)))?;
            reports.push((sink_name(plan), report));
        }
        let job = self.start_job(state, planned.into_iter().map(|(p, _)| p).collect())?;
        self.watch(state, &job, Some(Report::of_set(reports)));
        Ok(job)
    }

    /// `EXPLAIN STATEMENT SET`: each INSERT's plan and guarantee, then the scans shared.
    pub(super) async fn explain_set(&self, state: &State, members: &[ParsedStatement]) -> Result<String> {
        let planned = self.plan_set(state, members).await?;
        let mut roots: Vec<_> = planned.iter().map(|(p, _)| p.root.clone()).collect();
        let shared = weir_runtime::share_scans(&mut roots)?;
        let mut text = format!("Statement set: {} INSERTs, run as one job\n", planned.len());
        let plans: Vec<StreamPlan> =
            planned.iter().zip(roots).map(|((plan, _), root)| StreamPlan { root, sink: plan.sink.clone() }).collect();
        let (names, connectors): (Vec<String>, Vec<String>) =
            plans.iter().map(|p| (p.sink_name(), p.sink_connector())).unzip();
        let branches: Vec<weir_runtime::identity::Branch<'_>> = plans
            .iter()
            .zip(names.iter().zip(&connectors))
            .map(|(p, (sink, connector))| weir_runtime::identity::Branch { root: &p.root, sink, connector })
            .collect();
        let ids = weir_runtime::identity::Identities::of(&branches);
        for (k, plan) in plans.iter().enumerate() {
            text.push_str(&format!("INSERT {} of {}:\n", k + 1, planned.len()));
            text.push_str(&plan.explain_in(&ids, k));
            for line in self.guarantee(state, plan).lines {
                text.push_str(&line);
                text.push('\n');
            }
        }
        if shared.is_empty() {
            text.push_str("Shared scans: none (no table is read by more than one INSERT)\n");
        }
        for scan in shared {
            let readers: Vec<String> = scan.readers.iter().map(|r| (r + 1).to_string()).collect();
            text.push_str(&format!(
                "Shared scan: {} read once for INSERTs {}, columns [{}]\n",
                scan.table,
                readers.join(", "),
                scan.columns.join(", ")
            ));
        }
        Ok(text)
    }
}

fn sink_name(plan: &StreamPlan) -> String {
    match &plan.sink {
        SinkTarget::Table(t) => t.name.clone(),
        SinkTarget::Caller => "the caller".into(),
    }
}

impl Engine {
    /// `CREATE TABLE t WITH (…) AS SELECT …`: the table with the query's columns, then the
    /// job filling it. A job that cannot start leaves no table behind.
    pub(super) async fn create_table_as(
        &self,
        state: &mut State,
        ct: &weir_sql::parser::CreateTable,
        insert: &ParsedStatement,
    ) -> Result<JobHandle> {
        let Statement::Insert(q) = &insert.statement else {
            return Err(weir_core::WeirError::internal("CREATE TABLE … AS without its INSERT"));
        };
        let query = weir_sql::planner::query_of_insert(q)?;
        let plan = state.planner.plan(&query, &insert.tokens, insert.location).await?;
        state.planner.create_table_as(ct, &plan.root.schema(), insert.location)?;
        let started = async {
            let plan = state.planner.plan(q, &insert.tokens, insert.location).await?;
            let report = self.check_insert(state, &plan).await?;
            let job = self.start_job(state, vec![plan])?;
            self.watch(state, &job, Some(report));
            Ok(job)
        }
        .await;
        if started.is_err() {
            state.planner.drop(weir_sql::ObjectKind::Table, &ct.name, true)?;
        }
        started
    }
}
