//! `STDDEV_POP`, `STDDEV_SAMP`, `VAR_POP`, `VAR_SAMP` (and `VARIANCE`, `STDDEV`) as Flink
//! computes them. Flink does not run a variance algorithm: Calcite's
//! `AggregateReduceFunctionsRule` rewrites each into `SUM(x * x)`, `SUM(x)` and `COUNT(x)`,
//! then `(SUM(x * x) - SUM(x) * SUM(x) / COUNT(x)) / COUNT(x)` (over `COUNT(x) - 1`, NULL for
//! one value, for the sample), its square root for a deviation, cast to the result type. The
//! arithmetic is in the argument's type, so over integers the divisions truncate and the
//! result is an integer (`STDDEV_POP` of INT values 10, 20, 30 is 8). Weir keeps the same
//! three sums, which a retraction subtracts, and the same arithmetic, so its values are
//! Flink's. One difference: over DECIMAL Weir computes in DOUBLE and returns DOUBLE.

use datafusion::arrow::datatypes::DataType;

use super::aggregates::{Lane, Num};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Moment {
    StddevPop,
    StddevSamp,
    VarPop,
    VarSamp,
}

impl Moment {
    /// The function of a name (DataFusion's canonical names and Flink's).
    pub fn of_name(name: &str) -> Option<Moment> {
        Some(match name {
            "stddev_pop" => Moment::StddevPop,
            "stddev_samp" | "stddev" => Moment::StddevSamp,
            "var_pop" => Moment::VarPop,
            "var_samp" | "var" | "variance" => Moment::VarSamp,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Moment::StddevPop => "stddev_pop",
            Moment::StddevSamp => "stddev_samp",
            Moment::VarPop => "var_pop",
            Moment::VarSamp => "var_samp",
        }
    }

    /// Flink's result type: an integer argument's own type, DOUBLE for the others.
    pub fn result_type(arg: &DataType) -> Option<DataType> {
        match Lane::of(arg)? {
            Lane::Int => Some(arg.clone()),
            Lane::Float | Lane::Decimal(_) => Some(DataType::Float64),
        }
    }

    /// The lane the sums are kept in: integers as integers, everything else as DOUBLE.
    pub fn lane(arg: &DataType) -> Option<Lane> {
        Some(match Lane::of(arg)? {
            Lane::Int => Lane::Int,
            _ => Lane::Float,
        })
    }

    /// The value from `n` values, their sum and their sum of squares; `None` is NULL.
    pub fn value(self, n: i64, sum: Num, squares: Num) -> Option<Num> {
        if n <= 0 {
            return None;
        }
        let denominator = match self {
            Moment::StddevPop | Moment::VarPop => n,
            _ if n == 1 => return None,
            _ => n - 1,
        };
        let root = matches!(self, Moment::StddevPop | Moment::StddevSamp);
        match (sum, squares) {
            (Num::I(sum), Num::I(squares)) => {
                let variance = squares.wrapping_sub(sum.wrapping_mul(sum) / n) / denominator;
                // POWER(x, 0.5) is a DOUBLE; the cast back to an integer truncates.
                Some(Num::I(if root { (variance as f64).powf(0.5) as i64 } else { variance }))
            }
            (Num::F(sum), Num::F(squares)) => {
                let variance = (squares - sum * sum / n as f64) / denominator as f64;
                Some(Num::F(if root { variance.powf(0.5) } else { variance }))
            }
            _ => None,
        }
    }
}

/// `value` squared in its lane.
pub fn squared(value: Num) -> Num {
    match value {
        Num::I(v) => Num::I(v.wrapping_mul(v)),
        Num::F(v) => Num::F(v * v),
        Num::D(v) => Num::D(v.wrapping_mul(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> (i64, Num, Num) {
        let n = values.len() as i64;
        (n, Num::I(values.iter().sum()), Num::I(values.iter().map(|v| v * v).sum()))
    }

    #[test]
    fn integer_arithmetic_truncates_as_flinks_does() {
        // Flink 1.20.5 gives 7, 8, 50, 66 for 10, 20, 30, 20 (sql-tests/flink-ref/aggregates).
        let (n, s, q) = ints(&[10, 20, 30, 20]);
        assert_eq!(Moment::StddevPop.value(n, s, q), Some(Num::I(7)));
        assert_eq!(Moment::StddevSamp.value(n, s, q), Some(Num::I(8)));
        assert_eq!(Moment::VarPop.value(n, s, q), Some(Num::I(50)));
        assert_eq!(Moment::VarSamp.value(n, s, q), Some(Num::I(66)));
        let (n, s, q) = ints(&[5, 7, 5]);
        assert_eq!(Moment::VarPop.value(n, s, q), Some(Num::I(1)));
        let (n, s, q) = ints(&[2]);
        assert_eq!(Moment::VarSamp.value(n, s, q), None);
        assert_eq!(Moment::VarPop.value(n, s, q), Some(Num::I(0)));
        assert_eq!(Moment::VarPop.value(0, Num::I(0), Num::I(0)), None);
        let f = Moment::VarSamp.value(3, Num::F(17.0), Num::F(99.0));
        assert!(matches!(f, Some(Num::F(v)) if (v - 4.0 / 3.0).abs() < 1e-12));
    }
}

#[cfg(test)]
mod stored {
    use super::super::aggregates::{decode, encode, Acc, GroupState};
    use super::*;

    #[test]
    fn the_three_sums_survive_a_checkpoint_in_both_lanes() {
        let state = GroupState {
            rows: 3,
            updated: 42,
            accs: vec![
                Acc::Moments(3, Num::I(17), Num::I(99)),
                Acc::Count(3),
                Acc::Moments(2, Num::F(1.5), Num::F(2.25)),
            ],
        };
        let empty = [Acc::Moments(0, Num::I(0), Num::I(0)), Acc::Count(0), Acc::Moments(0, Num::F(0.0), Num::F(0.0))];
        let mut bytes = Vec::new();
        encode(&state, &mut bytes);
        assert_eq!(decode(&bytes, &empty).unwrap(), state);
        assert!(decode(&bytes[..bytes.len() - 1], &empty).is_err());
    }
}
