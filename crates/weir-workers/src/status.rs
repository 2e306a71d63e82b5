//! `weir status FILE.sql`: the tasks of the file's jobs, which worker runs each, the
//! checkpoint each last committed and how far behind its inputs it is. Everything comes from
//! the Kafka cluster (the groups' assignments and committed offsets), so any machine that
//! reaches it can ask; there is no registry of Weir's own.

use weir_core::Result;

use super::group;
use super::topology::Output;
use super::Layout;
use weir::Engine;

pub async fn status(engine: &Engine, sql: &str, json: bool) -> Result<String> {
    let mut jobs = Vec::new();
    for job in engine.prepare_jobs(sql).await? {
        let layout = Layout::new(job)?;
        jobs.push(tokio::task::block_in_place(|| describe(&layout))?);
    }
    if json {
        return Ok(format!("{}\n", serde_json::json!({ "jobs": jobs })));
    }
    let mut out = String::new();
    for job in &jobs {
        render(job, &mut out);
    }
    Ok(out)
}

/// One job's sub-topologies and tasks, as `--json` prints them.
fn describe(layout: &Layout) -> Result<serde_json::Value> {
    let name = &layout.job.name;
    let mut subs = Vec::new();
    for sub in &layout.subs {
        let group = sub.group(name);
        let topics = layout.topics_of(sub);
        let (state, owners) = group::assignment(&layout.kafka, &group)?;
        let writes = match &sub.output {
            Output::Repartition { topic, .. } => {
                Some(serde_json::json!({ "topic": topic, "partitions": layout.job.options.parallelism }))
            }
            _ => None,
        };
        let mut tasks = Vec::new();
        for p in 0..layout.tasks[&sub.id] as i32 {
            let owner = owners
                .iter()
                .find(|(_, parts)| parts.contains(&p))
                .map(|((client, host), _)| format!("{client} ({})", host.trim_start_matches('/')));
            let commits = group::committed(&layout.kafka, &sub.offsets_group(name), &topics, p)?;
            let checkpoint = commits.iter().filter_map(|c| c.checkpoint).max();
            let mut lag = 0i64;
            for (topic, commit) in topics.iter().zip(&commits) {
                let end = group::end_offset(&layout.kafka, topic, p)?;
                lag += (end - commit.offset.unwrap_or(0)).max(0);
            }
            tasks.push(serde_json::json!({
                "task": format!("{}/{p}", sub.id),
                "owner": owner,
                "checkpoint": checkpoint.map(|(n, _)| n),
                "ended": checkpoint.is_some_and(|(_, ended)| ended),
                "lag": lag,
            }));
        }
        subs.push(serde_json::json!({
            "id": sub.id,
            "description": sub.describe(),
            "group": group,
            "group_state": state,
            "members": owners.len(),
            "writes": writes,
            "tasks": tasks,
        }));
    }
    Ok(serde_json::json!({ "job": name, "sub_topologies": subs }))
}

/// The text `weir status` prints, from what `describe` found.
fn render(job: &serde_json::Value, out: &mut String) {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    let subs = job["sub_topologies"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("job '{}': {} sub-topologies\n", text(&job["job"]), subs.len()));
    for sub in &subs {
        out.push_str(&format!(
            "  {}, group '{}' ({}), {} member(s)\n",
            text(&sub["description"]),
            text(&sub["group"]),
            text(&sub["group_state"]),
            text(&sub["members"])
        ));
        if !sub["writes"].is_null() {
            out.push_str(&format!(
                "    writes {} ({} partitions)\n",
                text(&sub["writes"]["topic"]),
                text(&sub["writes"]["partitions"])
            ));
        }
        out.push_str(&format!("    {:<8} {:<40} {:<12} {:>10}\n", "task", "owner", "checkpoint", "lag"));
        for task in sub["tasks"].as_array().into_iter().flatten() {
            let checkpoint = match (&task["checkpoint"], task["ended"].as_bool()) {
                (serde_json::Value::Null, _) => "-".to_string(),
                (n, Some(true)) => format!("{n} (ended)"),
                (n, _) => n.to_string(),
            };
            out.push_str(&format!(
                "    {:<8} {:<40} {:<12} {:>10}\n",
                text(&task["task"]),
                text(&task["owner"]),
                checkpoint,
                text(&task["lag"])
            ));
        }
    }
}
