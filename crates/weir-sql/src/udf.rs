//! One shape for Weir's scalar functions whose result type does not depend on their
//! arguments: `udf!(Name, "sql_name", signature, result type)` declares the struct and its
//! `ScalarUDFImpl`; the function itself is `Name::run(&args, rows) -> Result<ArrayRef>`, and
//! constant arguments give a constant.

macro_rules! udf {
    ($name:ident, $sql:expr, $signature:expr, $ret:expr) => {
        #[derive(Debug, PartialEq, Eq, Hash)]
        pub struct $name {
            signature: Signature,
        }

        impl Default for $name {
            fn default() -> Self {
                Self { signature: $signature }
            }
        }

        impl ScalarUDFImpl for $name {
            fn name(&self) -> &str {
                $sql
            }

            fn signature(&self) -> &Signature {
                &self.signature
            }

            fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
                Ok($ret)
            }

            fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
                let rows = args.number_rows;
                let out = Self::run(&args, rows)?;
                crate::time_functions::scalar_or_array(&args.args, out)
            }
        }
    };
}

pub(crate) use udf;
