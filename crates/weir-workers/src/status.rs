//! `weir status FILE.sql`: the tasks of the file's jobs, which worker runs each, the
//! checkpoint each last committed and how far behind its inputs it is. Everything comes from
//! the Kafka cluster (the groups' assignments and committed offsets), so any machine that
//! reaches it can ask; there is no registry of Weir's own.

use weir_core::Result;

use super::group;
use super::topology::Output;
use super::Layout;
use weir::Engine;

pub async fn status(engine: &Engine, sql: &str) -> Result<String> {
    let mut out = String::new();
    for job in engine.prepare_jobs(sql).await? {
        let layout = Layout::new(job)?;
        tokio::task::block_in_place(|| describe(&layout, &mut out))?;
    }
    Ok(out)
}

fn describe(layout: &Layout, out: &mut String) -> Result<()> {
    let name = &layout.job.name;
    out.push_str(&format!("job '{name}': {} sub-topologies\n", layout.subs.len()));
    for sub in &layout.subs {
        let group = sub.group(name);
        let topics = layout.topics_of(sub);
        let (state, owners) = group::assignment(&layout.kafka, &group)?;
        out.push_str(&format!("  {}, group '{group}' ({state}), {} member(s)\n", sub.describe(), owners.len()));
        if let Output::Repartition { topic, .. } = &sub.output {
            out.push_str(&format!("    writes {topic} ({} partitions)\n", layout.job.options.parallelism));
        }
        out.push_str(&format!("    {:<8} {:<40} {:<12} {:>10}\n", "task", "owner", "checkpoint", "lag"));
        for p in 0..layout.tasks[&sub.id] as i32 {
            let owner = owners
                .iter()
                .find(|(_, parts)| parts.contains(&p))
                .map(|((client, host), _)| format!("{client} ({})", host.trim_start_matches('/')))
                .unwrap_or_else(|| "-".to_string());
            let commits = group::committed(&layout.kafka, &sub.offsets_group(name), &topics, p)?;
            let checkpoint = match commits.iter().filter_map(|c| c.checkpoint).max() {
                Some((n, true)) => format!("{n} (ended)"),
                Some((n, false)) => n.to_string(),
                None => "-".to_string(),
            };
            let mut lag = 0i64;
            for (topic, commit) in topics.iter().zip(&commits) {
                let end = group::end_offset(&layout.kafka, topic, p)?;
                lag += (end - commit.offset.unwrap_or(0)).max(0);
            }
            out.push_str(&format!(
                "    {:<8} {:<40} {:<12} {:>10}\n",
                format!("{}/{p}", sub.id),
                owner,
                checkpoint,
                lag
            ));
        }
    }
    Ok(())
}
