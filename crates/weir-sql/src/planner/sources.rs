//! Sources: a table's scan with its computed columns evaluated in the source task, its
//! watermark, an upsert source's changelog made retracting, and `OPTIONS` hints.

use std::sync::Arc;

use datafusion::common::DFSchema;
use datafusion::logical_expr::Expr;
use weir_core::{Result, TableDef, WeirError};
use weir_runtime::{Node, OperatorSpec, Partitioning};

use super::{legacy_option, Planner};

impl Planner {
    /// A source reading `wanted` columns of `table` (and the columns its watermark needs),
    /// with its watermark generated; an upsert source's rows also made a retracting
    /// changelog by key. Returns the node and the columns it outputs.
    pub(super) fn watermarked_source(&self, table: &Arc<TableDef>, wanted: &[usize]) -> Result<(Node, Vec<usize>)> {
        let (node, read) = self.watermarked_read(table, wanted)?;
        let weir_core::Changelog::Upsert(key) = self.connectors.source_changelog(&table.stored()) else {
            return Ok((node, read));
        };
        let key: Vec<usize> = key
            .iter()
            .map(|k| read.iter().position(|r| table.stored_index(*r) == Some(*k)))
            .collect::<Option<_>>()
            .ok_or_else(|| WeirError::internal("an upsert key column is not read"))?;
        let schema = node.schema();
        let exchange = Node::Exchange { partitioning: Partitioning::Hash(key.clone()), input: Box::new(node) };
        let spec = weir_runtime::operators::UpsertSpec { key, schema };
        Ok((exchange.with_operator(OperatorSpec::UpsertNormalize { spec }), read))
    }

    pub(super) fn watermarked_read(&self, table: &Arc<TableDef>, wanted: &[usize]) -> Result<(Node, Vec<usize>)> {
        let mut read = wanted.to_vec();
        let add = |read: &mut Vec<usize>, index: usize| {
            if !read.contains(&index) {
                read.push(index);
            }
        };
        // An upsert source reads its key too: rows are told apart by it.
        if let weir_core::Changelog::Upsert(key) = self.connectors.source_changelog(&table.stored()) {
            for k in key {
                let index = (0..table.schema.fields().len()).find(|i| table.stored_index(*i) == Some(k));
                add(&mut read, index.ok_or_else(|| WeirError::internal("an upsert key column is computed"))?);
            }
        }
        if table.watermark.is_some() {
            for column in self.watermark_expr(table, &table.schema)?.1 {
                add(&mut read, table.schema.index_of(&column)?);
            }
        }
        let node = self.computed_read(table, &read)?;
        let Some(wm) = &table.watermark else { return Ok((node, read)) };
        let (expr, _) = self.watermark_expr(table, &node.schema())?;
        let display = format!("{} AS {}", wm.column, wm.sql);
        Ok((node.with_operator(OperatorSpec::Watermark { expr, display }), read))
    }

    /// The source of `table`, giving its columns `read` in that order. Computed columns are
    /// evaluated in the source task, over the stored columns read for them: the connector only
    /// ever sees [`TableDef::stored`].
    pub(super) fn computed_read(&self, table: &Arc<TableDef>, read: &[usize]) -> Result<Node> {
        let stored = table.stored();
        let changelog = self.connectors.source_changelog(&stored);
        if table.computed.is_empty() {
            let schema = Arc::new(table.schema.project(read)?);
            return Ok(Node::Source { table: stored, projection: Some(read.to_vec()), schema, changelog });
        }
        // Stored columns to read: those wanted, then those the computed ones need.
        let mut projection: Vec<usize> = read.iter().filter_map(|i| table.stored_index(*i)).collect();
        let mut computed = Vec::new();
        for &index in read {
            if let Some(column) = table.computed_at(index) {
                let expr = self.computed_expr(table, column)?;
                for c in expr.column_refs() {
                    let at = stored.schema.index_of(&c.name)?;
                    if !projection.contains(&at) {
                        projection.push(at);
                    }
                }
                computed.push((index, expr));
            }
        }
        let read_schema = Arc::new(stored.schema.project(&projection)?);
        let df_schema = DFSchema::try_from(read_schema.as_ref().clone())?;
        let mut exprs = Vec::with_capacity(read.len());
        let mut display = Vec::with_capacity(read.len());
        for &index in read {
            let name = table.schema.field(index).name();
            match computed.iter().find(|(i, _)| *i == index) {
                Some((_, expr)) => {
                    exprs.push(self.physical(expr, &df_schema)?);
                    display.push(format!("{} AS {name}", expr.human_display()));
                }
                None => {
                    let at = table.stored_index(index).and_then(|s| projection.iter().position(|p| *p == s));
                    let at = at.ok_or_else(|| WeirError::internal("a stored column is not read"))?;
                    exprs.push(Arc::new(datafusion::physical_expr::expressions::Column::new(name, at)));
                    display.push(name.clone());
                }
            }
        }
        let source = Node::Source { table: stored, projection: Some(projection), schema: read_schema, changelog };
        let schema = Arc::new(table.schema.project(read)?);
        Ok(source.with_operator(OperatorSpec::Project { exprs, schema, display }))
    }

    /// The logical expression of computed column `column`, over the table's stored columns.
    fn computed_expr(&self, table: &Arc<TableDef>, column: &weir_core::ComputedColumn) -> Result<Expr> {
        let stored = DFSchema::try_from(table.stored().schema.as_ref().clone())?;
        Ok(self.ctx.state().create_logical_expr(&column.sql, &stored)?)
    }

    /// `table` with the options of an `OPTIONS` hint over its own, checked as `WITH` options.
    pub(super) fn with_hinted_options(
        &self,
        table: &Arc<TableDef>,
        options: &[(String, String)],
    ) -> Result<Arc<TableDef>> {
        let mut hinted = table.as_ref().clone();
        for (key, value) in options {
            let (key, mut value) = legacy_option(key, value);
            if let Some(base) = self.base_dir.as_ref().filter(|_| key == "path" && weir_core::is_relative_path(&value))
            {
                value = base.join(&value).to_string_lossy().into_owned();
            }
            hinted.options.insert(key, value, None);
        }
        let hinted = Arc::new(hinted);
        self.connectors.validate(&hinted.stored()).map_err(|e| e.context("in an OPTIONS hint"))?;
        Ok(hinted)
    }
}
