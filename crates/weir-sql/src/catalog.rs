//! Tables and views by name. Names follow Flink's rules: identifiers are case-sensitive and
//! kept as written, quoted or not (`dateTime` and `datetime` are two columns); keywords and
//! function names are case-insensitive.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::Ident;
use weir_core::TableDef;

#[derive(Debug, Clone)]
pub struct ViewDef {
    pub name: String,
    pub schema: SchemaRef,
    pub definition: String,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub tables: BTreeMap<String, Arc<TableDef>>,
    pub views: BTreeMap<String, ViewDef>,
}

/// The catalog name of an identifier: as written (Flink does not fold case).
pub fn normalize(ident: &Ident) -> String {
    ident.value.clone()
}

impl Catalog {
    pub fn exists(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.views.contains_key(name)
    }
}
