//! `CREATE TABLE`: columns (physical, computed, metadata), watermark, keys, partitions and
//! options; `LIKE` another table with Flink's merging options; `AS SELECT`.

use datafusion::sql::sqlparser::ast::{ArrayElemTypeDef, DataType, Ident, StructBracketKind, StructField};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan};
use weir_core::{Location, Result, WeirError};

use super::*;

impl StatementParser<'_, '_> {
    /// After `CREATE [TEMPORARY] TABLE`: a table, a table `LIKE` another, or `AS SELECT`.
    pub(super) fn create_table(&mut self) -> Result<Statement> {
        let if_not_exists = self.p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = self.name()?;
        let mut table = CreateTable {
            name,
            if_not_exists,
            columns: Vec::new(),
            watermark: None,
            primary_key: Vec::new(),
            partitioned_by: Vec::new(),
            options: Vec::new(),
            like: None,
        };
        // The column list may be left out before `WITH`, `LIKE` or `AS`.
        if self.p.consume_token(&Token::LParen) {
            self.columns(&mut table)?;
        }
        if self.p.parse_keyword(Keyword::COMMENT) {
            self.string()?;
        }
        if self.p.parse_keyword(Keyword::PARTITIONED) {
            self.p.expect_keyword_is(Keyword::BY).map_err(parser_error)?;
            table.partitioned_by = self.ident_list()?;
        }
        if self.p.parse_keyword(Keyword::WITH) {
            self.options(&mut table)?;
        }
        let at = self.here();
        if self.p.parse_keyword(Keyword::LIKE) {
            table.like = Some(self.like(at)?);
        } else if self.p.parse_keyword(Keyword::AS) {
            return self.create_table_as(table, at);
        } else if table.options.is_empty() {
            self.p.expect_keyword_is(Keyword::WITH).map_err(parser_error)?;
        }
        self.end()?;
        Ok(Statement::CreateTable(Box::new(table)))
    }

    /// The column list, after its `(`, up to its `)`.
    fn columns(&mut self, table: &mut CreateTable) -> Result<()> {
        loop {
            let at = self.here();
            if self.word("WATERMARK") {
                if table.watermark.is_some() {
                    return Err(WeirError::user("a table can have only one WATERMARK").at(Some(at)));
                }
                self.p.expect_keyword_is(Keyword::FOR).map_err(parser_error)?;
                let column = self.ident()?;
                self.p.expect_keyword_is(Keyword::AS).map_err(parser_error)?;
                let expr = self.p.parse_expr().map_err(parser_error)?;
                table.watermark = Some((column, expr));
            } else if self.p.parse_keyword(Keyword::CONSTRAINT) {
                self.ident()?;
                self.p.expect_keywords(&[Keyword::PRIMARY, Keyword::KEY]).map_err(parser_error)?;
                table.primary_key = self.primary_key()?;
            } else if self.p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
                table.primary_key = self.primary_key()?;
            } else {
                let name = self.ident()?;
                if self.p.parse_keyword(Keyword::AS) {
                    let expr = self.p.parse_expr().map_err(parser_error)?;
                    if self.p.parse_keyword(Keyword::COMMENT) {
                        self.string()?;
                    }
                    table.columns.push(ColumnDef {
                        name,
                        data_type: DataType::Unspecified,
                        not_null: false,
                        location: at,
                        metadata: None,
                        virtual_metadata: false,
                        computed: Some(expr),
                    });
                    if !self.p.consume_token(&Token::Comma) {
                        self.p.expect_token(&Token::RParen).map_err(parser_error)?;
                        break;
                    }
                    continue;
                }
                let data_type = self
                    .data_type()
                    .map_err(|e| e.context(format!("table '{}', column '{}'", table.name.value, name.value)))?;
                let mut not_null = false;
                let mut metadata = None;
                let mut virtual_metadata = false;
                loop {
                    if self.p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
                        not_null = true;
                    } else if self.p.parse_keyword(Keyword::NULL) {
                        not_null = false;
                    } else if self.p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
                        self.p.expect_keyword_is(Keyword::NOT).map_err(parser_error)?;
                        self.expect_word("ENFORCED")?;
                        table.primary_key = vec![name.clone()];
                    } else if self.p.parse_keyword(Keyword::METADATA) {
                        let key =
                            if self.p.parse_keyword(Keyword::FROM) { self.string()?.0 } else { name.value.clone() };
                        // VIRTUAL: read, but not written by a sink (nor given by an INSERT).
                        virtual_metadata = self.p.parse_keyword(Keyword::VIRTUAL);
                        metadata = Some(key);
                    } else if self.p.parse_keyword(Keyword::COMMENT) {
                        self.string()?;
                    } else {
                        break;
                    }
                }
                table.columns.push(ColumnDef {
                    name,
                    data_type,
                    not_null,
                    location: at,
                    metadata,
                    virtual_metadata,
                    computed: None,
                });
            }
            if !self.p.consume_token(&Token::Comma) {
                self.p.expect_token(&Token::RParen).map_err(parser_error)?;
                break;
            }
        }
        Ok(())
    }

    /// A column's type: Flink's collection and structured types (`ARRAY<T>`, `MAP<K, V>`,
    /// `ROW<name T, …>` or `ROW(name T, …)`), which sqlparser does not read in Flink's
    /// spelling, or any type sqlparser reads.
    fn data_type(&mut self) -> Result<DataType> {
        let (t, extra) = self.nested_type()?;
        if extra {
            return Err(WeirError::user("one '>' too many in this type").at(Some(self.here())));
        }
        Ok(t)
    }

    /// A type, and whether a `>>` after it closed this type's enclosing bracket too.
    fn nested_type(&mut self) -> Result<(DataType, bool)> {
        let at = self.here();
        if self.word("ARRAY") {
            self.p.expect_token(&Token::Lt).map_err(parser_error)?;
            let (element, closed) = self.nested_type()?;
            self.element_not_null();
            return Ok((DataType::Array(ArrayElemTypeDef::AngleBracket(Box::new(element))), self.close(closed)?));
        }
        if self.word("MAP") {
            self.p.expect_token(&Token::Lt).map_err(parser_error)?;
            let key = self.data_type()?;
            self.element_not_null();
            self.p.expect_token(&Token::Comma).map_err(parser_error)?;
            let (value, closed) = self.nested_type()?;
            self.element_not_null();
            return Ok((DataType::Map(Box::new(key), Box::new(value)), self.close(closed)?));
        }
        if self.word("ROW") {
            let angle = match self.p.next_token().token {
                Token::Lt => true,
                Token::LParen => false,
                _ => return Err(WeirError::user("ROW takes its fields in < > or ( )").at(Some(at))),
            };
            let mut fields = Vec::new();
            let mut closed = false;
            loop {
                let name = self.ident()?;
                let (field_type, extra) = self.nested_type()?;
                self.element_not_null();
                if self.p.parse_keyword(Keyword::COMMENT) {
                    self.string()?;
                }
                fields.push(StructField { field_name: Some(name), field_type, options: None });
                if extra {
                    closed = true;
                    break;
                }
                if !self.p.consume_token(&Token::Comma) {
                    break;
                }
            }
            let extra = match (angle, closed) {
                (true, true) => false,
                (true, false) => self.close(false)?,
                (false, _) => {
                    self.p.expect_token(&Token::RParen).map_err(parser_error)?;
                    false
                }
            };
            return Ok((DataType::Struct(fields, StructBracketKind::AngleBrackets), extra));
        }
        if self.word("MULTISET") {
            return Err(WeirError::not_supported("the column type MULTISET").at(Some(at)));
        }
        Ok((self.p.parse_data_type().map_err(parser_error)?, false))
    }

    /// `NOT NULL` on an element or field type: accepted, and the element kept nullable.
    fn element_not_null(&mut self) {
        let _ = self.p.parse_keywords(&[Keyword::NOT, Keyword::NULL]);
    }

    /// The `>` closing a type whose inner type ended `closed` (a `>>` closed both); whether
    /// this `>` came as the first half of a `>>` that closes the enclosing type too.
    fn close(&mut self, closed: bool) -> Result<bool> {
        if closed {
            return Ok(false);
        }
        match self.p.next_token().token {
            Token::Gt => Ok(false),
            Token::ShiftRight => Ok(true),
            other => {
                Err(WeirError::user(format!("expected '>' to close the type, found {other}")).at(Some(self.here())))
            }
        }
    }

    /// `('k' = 'v', …)` after `WITH`.
    fn options(&mut self, table: &mut CreateTable) -> Result<()> {
        self.p.expect_token(&Token::LParen).map_err(parser_error)?;
        loop {
            let (key, at) = self.string()?;
            self.p.expect_token(&Token::Eq).map_err(parser_error)?;
            let (value, _) = self.string()?;
            table.options.push((key, value, at));
            if !self.p.consume_token(&Token::Comma) {
                self.p.expect_token(&Token::RParen).map_err(parser_error)?;
                return Ok(());
            }
        }
    }

    /// `source [(like options)]` after `LIKE`: `{INCLUDING | EXCLUDING | OVERWRITING}
    /// {ALL | CONSTRAINTS | GENERATED | METADATA | OPTIONS | PARTITIONS | WATERMARKS}`, as
    /// Flink allows them (CONSTRAINTS, PARTITIONS and ALL are not overwritten).
    fn like(&mut self, location: Location) -> Result<LikeClause> {
        let source = self.name()?;
        let mut options = Vec::new();
        if self.p.consume_token(&Token::LParen) {
            loop {
                let at = self.here();
                let strategy = if self.word("INCLUDING") {
                    LikeStrategy::Including
                } else if self.word("EXCLUDING") {
                    LikeStrategy::Excluding
                } else if self.word("OVERWRITING") {
                    LikeStrategy::Overwriting
                } else {
                    let found = self.p.peek_token();
                    return Err(parser_error(
                        self.p.expected::<()>("INCLUDING, EXCLUDING or OVERWRITING", found).unwrap_err(),
                    ));
                };
                let feature_at = self.here();
                let feature = match &self.p.next_token().token {
                    Token::Word(w) => LikeFeature::named(&w.value),
                    _ => None,
                };
                let Some(feature) = feature else {
                    return Err(WeirError::user(
                        "expected ALL, CONSTRAINTS, GENERATED, METADATA, OPTIONS, PARTITIONS or WATERMARKS",
                    )
                    .at(Some(feature_at)));
                };
                if strategy == LikeStrategy::Overwriting && feature.not_overwritten() {
                    return Err(WeirError::user(format!(
                        "OVERWRITING {}: {} can only be included or excluded",
                        feature.name(),
                        feature.name()
                    ))
                    .at(Some(at)));
                }
                options.push((strategy, feature, at));
                if !self.p.consume_token(&Token::Comma) && matches!(self.p.peek_token().token, Token::RParen) {
                    self.p.next_token();
                    break;
                }
            }
        }
        Ok(LikeClause { source, options, location })
    }

    /// `CREATE TABLE t [WITH (…)] AS query`: the table's columns are the query's, and an
    /// `INSERT INTO t query` fills it, its tokens those of the query (so its errors have
    /// their places in the statement).
    fn create_table_as(&mut self, table: CreateTable, at: Location) -> Result<Statement> {
        if !table.columns.is_empty() || table.watermark.is_some() || !table.primary_key.is_empty() {
            return Err(WeirError::not_supported(
                "a column list in CREATE TABLE … AS SELECT (the columns are the query's, as in Flink 1.20)",
            )
            .at(Some(at)));
        }
        if table.if_not_exists {
            return Err(WeirError::not_supported("CREATE TABLE IF NOT EXISTS … AS SELECT").at(Some(at)));
        }
        let query_start = self.p.index();
        self.p.parse_query().map_err(parser_error)?;
        self.end()?;
        let query: Vec<TokenWithSpan> = self.tokens[query_start..]
            .iter()
            .skip_while(|t| matches!(t.token, Token::Whitespace(_)))
            .filter(|t| t.token != Token::EOF)
            .cloned()
            .collect();
        // `INSERT INTO t ` placed where `AS` stands.
        let span = self.tokens.get(query_start.saturating_sub(1)).map_or(Span::empty(), |t| t.span);
        let word = |w: &str| TokenWithSpan::new(Token::make_word(w, None), span);
        let space =
            TokenWithSpan::new(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space), span);
        let mut tokens = vec![word("INSERT"), space.clone(), word("INTO"), space.clone()];
        tokens.push(TokenWithSpan::new(Token::make_word(&table.name.value, table.name.quote_style), span));
        tokens.push(space);
        tokens.extend(query);
        let text = format!("INSERT INTO {} {}", table.name, tokens_text(&self.tokens[query_start..]));
        let insert = parse_statement(tokens, text)?;
        Ok(Statement::CreateTableAs { table: Box::new(table), insert: Box::new(insert) })
    }

    /// `(columns) NOT ENFORCED`, after `PRIMARY KEY`.
    fn primary_key(&mut self) -> Result<Vec<Ident>> {
        let columns = self.ident_list()?;
        self.p.expect_keyword_is(Keyword::NOT).map_err(parser_error)?;
        self.expect_word("ENFORCED")?;
        Ok(columns)
    }

    fn ident_list(&mut self) -> Result<Vec<Ident>> {
        self.p.expect_token(&Token::LParen).map_err(parser_error)?;
        let idents = self.p.parse_comma_separated(|p| p.parse_identifier()).map_err(parser_error)?;
        self.p.expect_token(&Token::RParen).map_err(parser_error)?;
        Ok(idents)
    }
}
