//! TLS against real servers: a PostgreSQL cluster with `ssl=on` and a
//! MariaDB with `ssl_cert` / `ssl_key` / `ssl_ca`, both presenting a
//! certificate for 127.0.0.1 and localhost signed by a throwaway CA
//! (rcgen), started once per process. On both backends: `require` connects,
//! coalesces with per-row outcomes and really is encrypted; the verifying
//! modes connect with the right CA and are refused, with an error saying
//! why, with a wrong CA or a wrong host name; a server without TLS is
//! refused under `require` and accepted under `prefer`; custom connectors.

use crate::common;

use std::time::Duration;

use crate::common::backend::wait_for;
use batchpool::{Error, Stats};

/// Callers queued behind a held connection, then flushed together.
const CALLERS: usize = 40;

/// Short limits: a refused handshake fails at once, but a bug that hangs
/// the connect (the pooler check under TLS did) must fail the test, not
/// stall it.
const CONNECT_LIMIT: Duration = Duration::from_secs(20);

fn assert_refused(e: &Error, needle: &str) {
    assert!(e.is_connect(), "not a connect error: {e} / {e:?}");
    let text = e.to_string();
    assert!(
        text.to_lowercase().contains(&needle.to_lowercase()),
        "the error should say {needle:?}: {text}"
    );
}

/// Waits until `n` rows are queued, then releases `held` so one flush
/// takes them together.
async fn release_when_queued<T>(stats: impl Fn() -> Stats, n: usize, held: T) {
    wait_for("the callers to queue", || stats().queued as usize == n).await;
    drop(held);
}

mod pg {
    use super::*;
    use batchpool::postgres::{Pool, SslMode};

    fn with(url: &str, params: &str) -> String {
        format!("{url}?{params}")
    }

    async fn pool(url: &str) -> Pool {
        Pool::builder(url)
            .max_size(1)
            .create_timeout(CONNECT_LIMIT)
            .wait_timeout(CONNECT_LIMIT)
            .build()
            .unwrap()
    }

    async fn encrypted(pool: &Pool) -> bool {
        pool.query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn require_connects_coalesces_and_is_encrypted() {
        let db = common::pg_tls_fresh_db().await;
        let pool = pool(&with(&db, "sslmode=require")).await;
        pool.execute(
            "CREATE TABLE t (id bigserial PRIMARY KEY, name text NOT NULL UNIQUE)",
            &[],
        )
        .await
        .unwrap();
        // The text learned first (its table is read with a connection).
        pool.execute("INSERT INTO t (name) VALUES ($1) RETURNING id", &[&"warm"])
            .await
            .unwrap();
        let held = pool.get().await.unwrap();
        let ssl: bool = held
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(ssl, "the pooled connection is not encrypted");
        let callers: Vec<_> = (0..CALLERS)
            .map(|i| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    // Caller 7 repeats caller 3's name: only it fails.
                    let name = format!("n{}", if i == 7 { 3 } else { i });
                    let out = pool
                        .execute("INSERT INTO t (name) VALUES ($1) RETURNING id", &[&name])
                        .await;
                    (name, out.map(|o| o.returned().map(|r| r.get::<_, i64>(0))))
                })
            })
            .collect();
        release_when_queued(|| pool.stats(), CALLERS, held).await;
        let mut failed = 0;
        for caller in callers {
            let (name, out) = caller.await.unwrap();
            match out {
                Ok(id) => {
                    let id = id.expect("a RETURNING row");
                    let row = pool
                        .query_one("SELECT name FROM t WHERE id = $1", &[&id])
                        .await
                        .unwrap();
                    assert_eq!(row.get::<_, String>(0), name, "another caller's id");
                }
                Err(e) => {
                    assert_eq!(e.code(), Some("23505"), "{e}");
                    failed += 1;
                }
            }
        }
        assert_eq!(failed, 1, "exactly the duplicate fails");
        let stats = pool.stats();
        assert!(stats.rows_per_batch() > 1.0, "not coalesced: {stats:?}");
        assert!(encrypted(&pool).await);
        // A direct server, not a pooler: named statements (the pooler
        // check reads the cancel key through TLS negotiation too).
        let client = pool.get().await.unwrap();
        let prepared: i64 = client
            .query_one("SELECT count(*) FROM pg_prepared_statements", &[])
            .await
            .unwrap()
            .get(0);
        assert!(
            prepared > 0,
            "a direct TLS connection was taken for a pooler"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_modes_connect_with_the_right_ca() {
        let server = common::pg_tls_server();
        let ca = server.certs().unwrap().ca.display().to_string();
        let db = common::pg_tls_fresh_db().await;
        for params in [
            format!("sslmode=verify-full&sslrootcert={ca}"),
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            // libpq: require with a root certificate verifies the chain.
            format!("sslmode=require&sslrootcert={ca}"),
        ] {
            let pool = pool(&with(&db, &params)).await;
            assert!(encrypted(&pool).await, "{params}");
        }
        // Key-value form, by host name; and the builder's settings.
        let dbname = db.rsplit('/').next().unwrap();
        let kv = format!(
            "host=localhost port={} user=postgres dbname={dbname} sslmode=verify-full \
             sslrootcert='{ca}'",
            server.port()
        );
        assert!(encrypted(&pool(&kv).await).await);
        let pool = Pool::builder(&db)
            .ssl_mode(SslMode::VerifyFull)
            .ssl_root_cert(&ca)
            .build()
            .unwrap();
        assert!(encrypted(&pool).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_ca_is_refused() {
        let server = common::pg_tls_server();
        let other = server.certs().unwrap().other_ca.display().to_string();
        let db = common::pg_tls_fresh_db().await;
        for params in [
            format!("sslmode=verify-full&sslrootcert={other}"),
            format!("sslmode=verify-ca&sslrootcert={other}"),
            // No root file: Mozilla's roots, which do not hold the test CA.
            "sslmode=verify-full".to_string(),
        ] {
            let e = pool(&with(&db, &params))
                .await
                .query("SELECT 1", &[])
                .await
                .unwrap_err();
            assert_refused(&e, "certificate");
            assert!(e.to_string().contains("UnknownIssuer"), "{params}: {e}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_host_name_is_refused_under_verify_full_only() {
        let server = common::pg_tls_server();
        let ca = server.certs().unwrap().ca.display().to_string();
        let db = common::pg_tls_fresh_db().await;
        let dbname = db.rsplit('/').next().unwrap();
        let kv = |mode: &str| {
            format!(
                "host=wrong.name hostaddr=127.0.0.1 port={} user=postgres dbname={dbname} \
                 sslmode={mode} sslrootcert='{ca}'",
                server.port()
            )
        };
        let e = pool(&kv("verify-full"))
            .await
            .query("SELECT 1", &[])
            .await
            .unwrap_err();
        assert_refused(&e, "not valid for name \"wrong.name\"");
        // verify-ca checks the chain only.
        assert!(encrypted(&pool(&kv("verify-ca")).await).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_without_tls_is_refused_under_require_and_used_under_prefer() {
        let db = common::pg_fresh_db().await;
        let plain = pool(&db).await;
        let ssl: String = plain.query_one("SHOW ssl", &[]).await.unwrap().get(0);
        assert_eq!(ssl, "off", "this test needs a server without TLS (PG_URL)");
        let e = pool(&with(&db, "sslmode=require"))
            .await
            .query("SELECT 1", &[])
            .await
            .unwrap_err();
        assert_refused(&e, "server does not support TLS");
        let prefer = pool(&with(&db, "sslmode=prefer")).await;
        assert!(!encrypted(&prefer).await);
        prefer.execute("CREATE TABLE t (v int)", &[]).await.unwrap();
        prefer
            .execute("INSERT INTO t (v) VALUES ($1)", &[&1i32])
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_custom_connector_is_used() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;

        let server = common::pg_tls_server();
        let certs = server.certs().unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&certs.ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(config);
        let db = common::pg_tls_fresh_db().await;
        let pool = Pool::builder(&with(&db, "sslmode=require"))
            .tls_connector(tls.clone())
            .create_timeout(CONNECT_LIMIT)
            .build()
            .unwrap();
        assert!(encrypted(&pool).await);
        // The connector verifies: it trusts the test CA for 127.0.0.1, not
        // a name the certificate lacks.
        let dbname = db.rsplit('/').next().unwrap();
        let wrong = format!(
            "host=wrong.name hostaddr=127.0.0.1 port={} user=postgres dbname={dbname} \
             sslmode=require",
            server.port()
        );
        let e = Pool::builder(&wrong)
            .tls_connector(tls.clone())
            .build()
            .unwrap()
            .query("SELECT 1", &[])
            .await
            .unwrap_err();
        assert_refused(&e, "not valid for name");
        // Files are the connector's business.
        let e = Pool::builder(&with(&db, "sslmode=require&sslrootcert=/x.pem"))
            .tls_connector(tls)
            .build()
            .unwrap_err();
        assert!(e.is_config(), "{e}");
    }

    #[test]
    fn a_missing_root_file_fails_build() {
        let e = Pool::builder("host=127.0.0.1 sslmode=verify-full sslrootcert=/nonexistent.pem")
            .build()
            .unwrap_err();
        assert!(
            e.is_config() && e.to_string().contains("/nonexistent.pem"),
            "{e}"
        );
    }
}

mod mysql {
    use super::*;
    use batchpool::mysql::{Pool, SslMode};
    use mysql_async::SslOpts;

    fn with(url: &str, params: &str) -> String {
        format!("{url}?{params}")
    }

    fn builder(url: &str) -> batchpool::mysql::PoolBuilder {
        Pool::builder(url)
            .max_size(1)
            .create_timeout(CONNECT_LIMIT)
            .wait_timeout(CONNECT_LIMIT)
    }

    async fn cipher(pool: &Pool) -> String {
        let row: Option<(String, String)> = pool
            .query_opt("SHOW SESSION STATUS LIKE 'Ssl_cipher'", ())
            .await
            .unwrap()
            .map(mysql_async::from_row);
        row.map(|(_, v)| v).unwrap_or_default()
    }

    fn ca_path(which: fn(&common::TestCerts) -> &std::path::PathBuf) -> std::path::PathBuf {
        which(common::mysql_tls_server().certs().unwrap()).clone()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn required_connects_coalesces_and_is_encrypted() {
        let db = common::mysql_tls_fresh_db().await;
        let pool = builder(&with(&db, "ssl-mode=REQUIRED")).build().unwrap();
        pool.execute(
            "CREATE TABLE t (id bigint AUTO_INCREMENT PRIMARY KEY, name varchar(20) NOT NULL \
             UNIQUE) ENGINE=InnoDB",
            (),
        )
        .await
        .unwrap();
        assert!(!cipher(&pool).await.is_empty(), "not encrypted");
        // The text learned first (its table is read with a connection).
        pool.execute("INSERT INTO t (name) VALUES (?)", ("warm",))
            .await
            .unwrap();
        let held = pool.get().await.unwrap();
        let callers: Vec<_> = (0..CALLERS)
            .map(|i| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let name = format!("n{}", if i == 7 { 3 } else { i });
                    let out = pool
                        .execute("INSERT INTO t (name) VALUES (?)", (name.clone(),))
                        .await;
                    (name, out.map(|o| o.last_insert_id()))
                })
            })
            .collect();
        release_when_queued(|| pool.stats(), CALLERS, held).await;
        let mut failed = 0;
        for caller in callers {
            let (name, out) = caller.await.unwrap();
            match out {
                Ok(id) => {
                    let id = id.expect("a provable id");
                    let got: Option<String> = pool
                        .query_opt("SELECT name FROM t WHERE id = ?", (id,))
                        .await
                        .unwrap()
                        .map(mysql_async::from_row);
                    assert_eq!(got.as_deref(), Some(name.as_str()), "another caller's id");
                }
                Err(e) => {
                    assert_eq!(e.as_mysql_error().map(|e| e.code), Some(1062), "{e}");
                    failed += 1;
                }
            }
        }
        assert_eq!(failed, 1, "exactly the duplicate fails");
        let stats = pool.stats();
        assert!(stats.rows_per_batch() > 1.0, "not coalesced: {stats:?}");
        assert!(!cipher(&pool).await.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_identity_connects_with_the_right_ca_and_refuses_a_wrong_one() {
        let db = common::mysql_tls_fresh_db().await;
        let ca = ca_path(|c| &c.ca);
        let url = with(
            &db,
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display()),
        );
        assert!(!cipher(&builder(&url).build().unwrap()).await.is_empty());
        // mysql_async's own parameter, with the CA from batchpool's.
        let url = with(&db, &format!("require_ssl=true&ssl-ca={}", ca.display()));
        assert!(!cipher(&builder(&url).build().unwrap()).await.is_empty());
        // The builder's mode.
        let url = with(&db, &format!("ssl-ca={}", ca.display()));
        let pool = builder(&url)
            .ssl_mode(SslMode::VerifyIdentity)
            .build()
            .unwrap();
        assert!(!cipher(&pool).await.is_empty());

        let other = ca_path(|c| &c.other_ca);
        for params in [
            format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", other.display()),
            format!("ssl-mode=VERIFY_CA&ssl-ca={}", other.display()),
            "ssl-mode=VERIFY_IDENTITY".to_string(),
        ] {
            let e = builder(&with(&db, &params))
                .build()
                .unwrap()
                .query("SELECT 1", ())
                .await
                .unwrap_err();
            assert_refused(&e, "certificate");
            assert!(e.to_string().contains("UnknownIssuer"), "{params}: {e}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn custom_ssl_opts_and_a_wrong_host_name() {
        let db = common::mysql_tls_fresh_db().await;
        let ssl = SslOpts::default()
            .with_root_certs(vec![ca_path(|c| &c.ca).into()])
            .with_disable_built_in_roots(true);
        let pool = builder(&db).ssl_opts(ssl.clone()).build().unwrap();
        assert!(!cipher(&pool).await.is_empty());
        let wrong = ssl.with_danger_tls_hostname_override(Some("wrong.name"));
        let e = builder(&db)
            .ssl_opts(wrong)
            .build()
            .unwrap()
            .query("SELECT 1", ())
            .await
            .unwrap_err();
        assert_refused(&e, "not valid for name \"wrong.name\"");
        let e = builder(&with(&db, "ssl-ca=/x.pem"))
            .ssl_opts(SslOpts::default())
            .build()
            .unwrap_err();
        assert!(e.is_config(), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_without_tls_is_refused_under_required_and_used_under_preferred() {
        let db = common::mysql_fresh_db().await;
        let have: Option<(String, String)> = builder(&db)
            .build()
            .unwrap()
            .query_opt("SHOW VARIABLES LIKE 'have_ssl'", ())
            .await
            .unwrap()
            .map(mysql_async::from_row);
        assert_ne!(
            have.map(|(_, v)| v).as_deref(),
            Some("YES"),
            "this test needs a server without TLS (MYSQL_URL)"
        );
        let e = builder(&with(&db, "ssl-mode=REQUIRED"))
            .build()
            .unwrap()
            .query("SELECT 1", ())
            .await
            .unwrap_err();
        assert_refused(&e, "server does not have this capability");
        let preferred = builder(&with(&db, "ssl-mode=PREFERRED")).build().unwrap();
        assert!(cipher(&preferred).await.is_empty());
        // And on a server with TLS, PREFERRED encrypts.
        let tls_db = common::mysql_tls_fresh_db().await;
        let preferred = builder(&with(&tls_db, "ssl-mode=PREFERRED"))
            .build()
            .unwrap();
        assert!(!cipher(&preferred).await.is_empty());
    }
}
