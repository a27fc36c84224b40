use mysql_async::prelude::*;
use mysql_async::{Opts, Pool, Value};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = Pool::new(Opts::from_url("mysql://root@127.0.0.1:3306/test")?);
    let mut c = pool.get_conn().await?;
    let st = c.prep("DO ?").await?;
    let r = c
        .exec_batch(&st, vec![vec![Value::from(1)], vec![Value::from(2)]])
        .await;
    println!("probe: {:?}", r.as_ref().err().map(|e| e.to_string()));
    if let Err(mysql_async::Error::Server(se)) = &r {
        println!("code {}", se.code);
    }
    c.close(st).await?;
    let v: Option<i32> = c.query_first("SELECT 1").await?;
    println!("after: {v:?}");
    // mixed types bulk
    c.query_drop("DROP TABLE IF EXISTS bulk_m").await?;
    c.query_drop("CREATE TABLE bulk_m (id BIGINT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
        .await?;
    let st = c.prep("INSERT INTO bulk_m VALUES (?, ?)").await?;
    let r = c
        .exec_batch(
            &st,
            vec![
                vec![Value::from(1), Value::from("a")],
                vec![Value::from("2"), Value::from(5)],
                vec![Value::NULL, Value::from("x")],
            ],
        )
        .await;
    println!("mixed: {:?}", r.err().map(|e| e.to_string()));
    let rows: Vec<(i64, Option<String>)> = c.query("SELECT id, v FROM bulk_m").await?;
    println!("{rows:?}");
    Ok(())
}
