//! Planning joins. Two windowed inputs joined on their `window_start` and `window_end` are a
//! window join (joined once per window, append-only); any other join on equal keys is a
//! regular join, both inputs kept in state. A key that is an expression (`mod(b.auction,
//! 10000) = s.key`) is computed by a projection on its input, and dropped after the join.

use datafusion::common::JoinType;
use datafusion::logical_expr::ExprSchemable;
use weir_runtime::operators::{JoinKind, JoinSpec};

use super::windowed::window_columns;
use super::*;

/// One input of a join as planned: its node (with computed keys appended), its key columns,
/// and its schema with the computed keys.
struct JoinInput {
    node: Node,
    keys: Vec<usize>,
    schema: DFSchema,
}

impl Planner {
    pub(super) fn join_node(&self, join: &datafusion::logical_expr::Join) -> Result<Node> {
        let kind = match join.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            JoinType::LeftSemi => JoinKind::LeftSemi,
            JoinType::LeftAnti => JoinKind::LeftAnti,
            JoinType::RightSemi => JoinKind::RightSemi,
            JoinType::RightAnti => JoinKind::RightAnti,
            other => return Err(WeirError::not_supported(format!("{other} joins"))),
        };
        let left = self.join_input(&join.left, join.on.iter().map(|(l, _)| l), "left")?;
        let right = self.join_input(&join.right, join.on.iter().map(|(_, r)| r), "right")?;
        for (l, r) in left.keys.iter().zip(&right.keys) {
            let (lf, rf) = (left.schema.field(*l), right.schema.field(*r));
            if lf.data_type() != rf.data_type() {
                return Err(WeirError::user(format!(
                    "join keys '{}' ({}) and '{}' ({}) have different types: CAST one of them",
                    lf.name(),
                    lf.data_type(),
                    rf.name(),
                    rf.data_type()
                )));
            }
        }
        // The condition reads a left row and a right row side by side, whatever the join type.
        let pairs = left.schema.join(&right.schema)?;
        let filter = join.filter.as_ref().map(|f| self.physical(f, &pairs)).transpose()?;
        let computed = left.schema.fields().len() > join.left.schema().fields().len()
            || right.schema.fields().len() > join.right.schema().fields().len();
        let display = format!(
            "{} on {}{}",
            join.join_type,
            if join.on.is_empty() { "no equal keys (every row meets every row of the other side, in one task)".to_string() } else { join.on
                .iter()
                .map(|(l, r)| format!("{} = {}", l.human_display(), r.human_display()))
                .collect::<Vec<_>>()
                .join(" AND ") },
            join.filter.as_ref().map(|f| format!(" filter {}", f.human_display())).unwrap_or_default()
        );
        let one_side = matches!(
            kind,
            JoinKind::LeftSemi | JoinKind::LeftAnti | JoinKind::RightSemi | JoinKind::RightAnti
        );
        let schema = if one_side || !computed { Arc::new(join.schema.as_arrow().clone()) } else { Arc::new(pairs.as_arrow().clone()) };
        let ends = self.window_ends(join, &left, &right);
        let spec = JoinSpec {
            kind,
            keys: [left.keys.clone(), right.keys.clone()],
            schemas: [left.node.schema(), right.node.schema()],
            filter,
            pair_schema: Arc::new(pairs.as_arrow().clone()),
            schema,
            ttl: None,
        };
        let spec = match ends {
            Some(ends) => OperatorSpec::WindowJoin { spec, ends, display },
            None => {
                if one_side {
                    return Err(WeirError::not_supported(
                        "IN and EXISTS subqueries (semi and anti joins) outside a window join",
                    ));
                }
                let ttl = self.state_ttl.map(|d| d.as_millis().min(i64::MAX as u128) as i64);
                if left.keys.is_empty() {
                    log::warn!(
                        "a join without equal keys ({display}) keeps every row of both inputs in one task and \
                         compares each with all of the other side's: set 'table.exec.state.ttl' to bound it"
                    );
                }
                OperatorSpec::Join { spec: JoinSpec { ttl, ..spec }, display }
            }
        };
        let node = Node::Join {
            left: Box::new(Node::Exchange { partitioning: Partitioning::Hash(left.keys), input: Box::new(left.node) }),
            right: Box::new(Node::Exchange { partitioning: Partitioning::Hash(right.keys), input: Box::new(right.node) }),
            spec,
        };
        if !computed || one_side {
            return Ok(node);
        }
        // Drop the computed keys: the output is the join's declared columns.
        let (l, r) = (join.left.schema().fields().len(), join.right.schema().fields().len());
        let left_all = left.schema.fields().len();
        let indices: Vec<usize> = (0..l).chain(left_all..left_all + r).collect();
        Ok(node.with_operator(OperatorSpec::Select { indices, schema: Arc::new(join.schema.as_arrow().clone()) }))
    }

    /// Plan one input of a join and find its keys, appending a column for each key that is
    /// an expression rather than a column.
    fn join_input<'a>(
        &self,
        plan: &LogicalPlan,
        keys: impl Iterator<Item = &'a Expr>,
        side: &str,
    ) -> Result<JoinInput> {
        let mut node = self.to_node(plan)?;
        let schema = plan.schema();
        let mut columns = Vec::new();
        let mut computed: Vec<&Expr> = Vec::new();
        for key in keys {
            match key {
                Expr::Column(c) => columns.push(schema.index_of_column(c)?),
                other => {
                    columns.push(schema.fields().len() + computed.len());
                    computed.push(other);
                }
            }
        }
        if computed.is_empty() {
            return Ok(JoinInput { node, keys: columns, schema: schema.as_ref().clone() });
        }
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut display = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            exprs.push(Arc::new(datafusion::physical_expr::expressions::Column::new(f.name(), i)));
            display.push(f.name().clone());
        }
        let mut fields = Vec::new();
        for (i, e) in computed.iter().enumerate() {
            let (_, field) = e.to_field(schema)?;
            fields.push(Field::new(format!("__weir_{side}_key_{i}"), field.data_type().clone(), field.is_nullable()));
            exprs.push(self.physical(e, schema)?);
            display.push(e.human_display().to_string());
        }
        let extra = DFSchema::from_unqualified_fields(fields.into(), Default::default())?;
        let with_keys = schema.join(&extra)?;
        node = node.with_operator(OperatorSpec::Project {
            exprs,
            schema: Arc::new(with_keys.as_arrow().clone()),
            display,
        });
        Ok(JoinInput { node, keys: columns, schema: with_keys })
    }

    /// `Some(window_end of each input)` if this is a window join: both inputs carry a window
    /// and are joined on its `window_start` and `window_end`.
    fn window_ends(&self, join: &datafusion::logical_expr::Join, left: &JoinInput, right: &JoinInput) -> Option<[usize; 2]> {
        let (left_start, left_end) = window_columns(&join.left)?;
        let (right_start, right_end) = window_columns(&join.right)?;
        let joined_on = |l: usize, r: usize| left.keys.iter().zip(&right.keys).any(|(a, b)| *a == l && *b == r);
        (joined_on(left_start, right_start) && joined_on(left_end, right_end)).then_some([left_end, right_end])
    }
}
