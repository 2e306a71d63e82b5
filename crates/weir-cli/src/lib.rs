//! What the `weir` command has beside its commands: the sqllogictest runner of `weir test`
//! (and of the project's own `sql-tests/`), kept here so that a program embedding `weir`
//! does not compile it.

pub mod slt;
