//! Tables and views by name. Names follow DataFusion's rules: unquoted identifiers are folded
//! to lower case, quoted ones are kept as written.

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

/// The catalog name of an identifier.
pub fn normalize(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

impl Catalog {
    pub fn exists(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.views.contains_key(name)
    }
}
