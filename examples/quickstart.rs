//! The quickstart job through the embedded API: the same tables as `examples/quickstart.sql`,
//! with the query's rows streamed back to this program instead of a print sink.
//!
//!     cargo run --example quickstart

use futures::StreamExt;

#[tokio::main]
async fn main() -> weir::Result<()> {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let engine = weir::Engine::new().with_base_dir(examples);
    engine
        .execute_all(
            "CREATE TABLE bids (
                auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
                date_time TIMESTAMP(3), extra STRING,
                WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
            ) WITH ('connector' = 'filesystem', 'path' = 'data/bids.csv', 'format' = 'csv')",
        )
        .await?;
    let mut rows = engine
        .query(
            "SELECT auction, bidder, CAST(price * 0.908 AS DECIMAL(10, 2)) AS price_eur, date_time
             FROM bids WHERE price >= 10000",
        )
        .await?;
    let mut total = 0;
    while let Some(batch) = rows.next().await {
        let batch = batch?.batch;
        total += batch.num_rows();
        println!("{}", weir::arrow::util::pretty::pretty_format_batches(&[batch]).map_err(weir::WeirError::from)?);
    }
    println!("{total} rows");
    Ok(())
}
