//! [`PoolConfig`]: every setting of a [`PoolBuilder`] as plain data, read
//! with serde from a config file or the environment (feature `serde`), as
//! deadpool-postgres's `Config` is.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::backend::Backend;
use crate::config::{BatchConfig, QueueFull};
use crate::error::{Error, Kind};
use crate::pool::{Pool, PoolBuilder};

/// A pool's settings as data: deserialise it from your service's config
/// (any serde format) or read it from environment variables with
/// [`from_env`](PoolConfig::from_env), then build with
/// [`builder`](PoolConfig::builder) (or [`build`](PoolConfig::build)).
///
/// Every field is optional; a missing one keeps the [`PoolBuilder`]
/// default. Durations are written as humantime strings (`"250ms"`, `"2s"`,
/// `"1m 30s"`). Unknown keys are refused, so a typo is an error, not a
/// silent default.
///
/// ```no_run
/// # fn demo() -> Result<(), batchpool::Error> {
/// // APP_DB_URL=postgresql://app@db.internal/app
/// // APP_DB_PASSWORD=...            (kept apart from the URL)
/// // APP_DB_MAX_SIZE=16
/// // APP_DB_WAIT_TIMEOUT=2s
/// // APP_DB_BATCH_MAX_ROWS=500
/// // APP_DB_ON_CONNECT="SET application_name = 'orders'"
/// let pool: batchpool::postgres::Pool = batchpool::PoolConfig::from_env("APP_DB_")?.build()?;
/// # let _ = pool; Ok(()) }
/// ```
///
/// Its `Debug` shows neither the password nor the connection string
/// (which may hold one): `Debug` of the built [`PoolBuilder`] shows the
/// parsed settings without the password.
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Connection string, as for [`Pool::builder`] (required).
    pub url: Option<String>,
    /// Password, replacing the connection string's (keep it in a secret).
    pub password: Option<String>,
    /// [`PoolBuilder::name`]: the `pool` label of the pool's metrics.
    pub name: Option<String>,
    /// [`PoolBuilder::max_size`].
    pub max_size: Option<usize>,
    /// [`PoolBuilder::wait_timeout`].
    #[serde(with = "humantime_serde")]
    pub wait_timeout: Option<Duration>,
    /// [`PoolBuilder::create_timeout`].
    #[serde(with = "humantime_serde")]
    pub create_timeout: Option<Duration>,
    /// [`PoolBuilder::recycle_timeout`].
    #[serde(with = "humantime_serde")]
    pub recycle_timeout: Option<Duration>,
    /// [`PoolBuilder::statement_timeout`].
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Option<Duration>,
    /// [`PoolBuilder::tcp_keepalive`].
    #[serde(with = "humantime_serde")]
    pub tcp_keepalive: Option<Duration>,
    /// [`PoolBuilder::tcp_user_timeout`].
    #[serde(with = "humantime_serde")]
    pub tcp_user_timeout: Option<Duration>,
    /// [`PoolBuilder::statement_cache`].
    pub statement_cache: Option<usize>,
    /// [`PoolBuilder::max_lifetime`].
    #[serde(with = "humantime_serde")]
    pub max_lifetime: Option<Duration>,
    /// [`PoolBuilder::idle_timeout`].
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Option<Duration>,
    /// PostgreSQL's `PoolBuilder::copy_threshold`: a row count, or `"off"`
    /// (`Some(None)`).
    #[serde(deserialize_with = "threshold")]
    pub copy_threshold: Option<Option<usize>>,
    /// MySQL's `PoolBuilder::bulk_threshold`: a row count, or `"off"`
    /// (`Some(None)`).
    #[serde(deserialize_with = "threshold")]
    pub bulk_threshold: Option<Option<usize>>,
    /// MySQL's `PoolBuilder::coalesce_upserts`.
    pub coalesce_upserts: Option<bool>,
    /// PostgreSQL's `PoolBuilder::statements`: `"auto"`, `"named"` or
    /// `"unnamed"`, as the connection string's `statements=` (which wins).
    pub statements: Option<String>,
    /// PostgreSQL's `PoolBuilder::pooler`: `"auto"`, `"none"`,
    /// `"transaction"`, `"statement"` or `"pgpool"`, as the connection
    /// string's `pooler=` (which wins).
    pub pooler: Option<String>,
    /// The backend's `PoolBuilder::ssl_mode`, written as its connection
    /// string writes it (`"verify-full"` for PostgreSQL, `"VERIFY_IDENTITY"`
    /// for MySQL); the connection string's own mode wins.
    pub ssl_mode: Option<String>,
    /// PostgreSQL's `PoolBuilder::ssl_root_cert` (for MySQL, the URL's
    /// `ssl-ca`).
    pub ssl_root_cert: Option<PathBuf>,
    /// SQL run on every new connection (and after a session reset), as a
    /// `post_create` hook: one or more statements separated by `;`.
    pub on_connect: Option<String>,
    /// [`BatchConfig::max_rows`].
    pub batch_max_rows: Option<usize>,
    /// [`BatchConfig::max_bytes`].
    pub batch_max_bytes: Option<usize>,
    /// [`BatchConfig::max_delay`] (timed batching).
    #[serde(with = "humantime_serde")]
    pub batch_max_delay: Option<Duration>,
    /// [`BatchConfig::queue_capacity`].
    pub batch_queue_capacity: Option<usize>,
    /// [`BatchConfig::queue_full`]: `"wait"` or `"reject"`.
    pub batch_queue_full: Option<QueueFullSetting>,
    /// [`BatchConfig::cache_capacity`].
    pub batch_cache_capacity: Option<usize>,
    /// [`BatchConfig::max_in_flight`].
    pub batch_max_in_flight: Option<usize>,
    /// [`BatchConfig::adapt_in_flight`].
    pub batch_adapt_in_flight: Option<bool>,
    /// [`BatchConfig::enabled`].
    pub batch_enabled: Option<bool>,
    /// [`BatchConfig::relearn_after`].
    #[serde(with = "humantime_serde")]
    pub batch_relearn_after: Option<Duration>,
    /// [`BatchConfig::pipeline`].
    pub batch_pipeline: Option<bool>,
    /// [`BatchConfig::reads`].
    pub batch_reads: Option<bool>,
    /// [`BatchConfig::updates`].
    pub batch_updates: Option<bool>,
    /// [`BatchConfig::deletes`].
    pub batch_deletes: Option<bool>,
}

/// [`QueueFull`] as written in a config: `"wait"` or `"reject"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueFullSetting {
    /// [`QueueFull::Wait`].
    Wait,
    /// [`QueueFull::Reject`].
    Reject,
}

impl From<QueueFullSetting> for QueueFull {
    fn from(q: QueueFullSetting) -> QueueFull {
        match q {
            QueueFullSetting::Wait => QueueFull::Wait,
            QueueFullSetting::Reject => QueueFull::Reject,
        }
    }
}

impl fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |set: bool| if set { Some("<hidden>") } else { None };
        f.debug_struct("PoolConfig")
            .field("url", &hidden(self.url.is_some()))
            .field("password", &hidden(self.password.is_some()))
            .field("max_size", &self.max_size)
            .field("wait_timeout", &self.wait_timeout)
            .field("create_timeout", &self.create_timeout)
            .field("recycle_timeout", &self.recycle_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("tcp_keepalive", &self.tcp_keepalive)
            .field("tcp_user_timeout", &self.tcp_user_timeout)
            .field("statement_cache", &self.statement_cache)
            .field("max_lifetime", &self.max_lifetime)
            .field("idle_timeout", &self.idle_timeout)
            .field("copy_threshold", &self.copy_threshold)
            .field("bulk_threshold", &self.bulk_threshold)
            .field("coalesce_upserts", &self.coalesce_upserts)
            .field("statements", &self.statements)
            .field("pooler", &self.pooler)
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_root_cert", &self.ssl_root_cert)
            .field("on_connect", &self.on_connect)
            .field("batching", &self.batching())
            .finish()
    }
}

impl PoolConfig {
    /// Reads the settings from environment variables named `prefix` +
    /// the field name in upper case (`APP_DB_` + `MAX_SIZE`). Variables
    /// with the prefix that name no field are an error.
    pub fn from_env(prefix: &str) -> Result<PoolConfig, Error> {
        PoolConfig::from_vars(prefix, std::env::vars())
    }

    /// As [`from_env`](PoolConfig::from_env), from the given `(name,
    /// value)` pairs instead of the process environment.
    pub fn from_vars(
        prefix: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<PoolConfig, Error> {
        let vars: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .collect();
        envy::prefixed(prefix)
            .from_iter::<_, PoolConfig>(vars.clone())
            .map_err(|e| {
                // envy does not always say which variable it choked on:
                // find it by reading each alone.
                let culprit = vars.iter().find(|var| {
                    envy::prefixed(prefix)
                        .from_iter::<_, PoolConfig>([(*var).clone()])
                        .is_err()
                });
                let message = match culprit {
                    Some((name, _)) => format!("invalid pool setting {name}"),
                    None => format!("invalid pool settings in {prefix}* environment variables"),
                };
                Error::with_source(Kind::Config, message, e)
            })
    }

    /// The batching settings: the defaults with this config's `batch_*`
    /// fields applied.
    pub fn batching(&self) -> BatchConfig {
        let mut b = BatchConfig::default();
        macro_rules! apply {
            ($($field:ident => $target:ident),* $(,)?) => {
                $(if let Some(v) = self.$field.clone() { b.$target = v.into(); })*
            };
        }
        apply! {
            batch_max_rows => max_rows,
            batch_max_bytes => max_bytes,
            batch_queue_capacity => queue_capacity,
            batch_queue_full => queue_full,
            batch_cache_capacity => cache_capacity,
            batch_enabled => enabled,
            batch_relearn_after => relearn_after,
            batch_pipeline => pipeline,
            batch_reads => reads,
            batch_updates => updates,
            batch_deletes => deletes,
            batch_adapt_in_flight => adapt_in_flight,
        }
        if let Some(d) = self.batch_max_delay {
            b.max_delay = Some(d);
        }
        if let Some(n) = self.batch_max_in_flight {
            b.max_in_flight = Some(n);
        }
        b
    }

    /// A [`PoolBuilder`] with these settings (for backend `B`, e.g.
    /// `config.builder::<batchpool::postgres::Postgres>()`), to adjust
    /// further before [`build`](PoolBuilder::build).
    pub fn builder<B: Backend>(&self) -> Result<PoolBuilder<B>, Error> {
        let Some(url) = &self.url else {
            return Err(Error::new(Kind::Config, "pool settings need a url"));
        };
        let mut config = B::parse_config(url)?;
        if let Some(password) = &self.password {
            config = B::set_password(config, password);
        }
        let mut b = PoolBuilder::<B>::new(Ok(config)).batching(self.batching());
        if let Some(name) = &self.name {
            b = b.name(name.clone());
        }
        if let Some(n) = self.max_size {
            b = b.max_size(n);
        }
        if let Some(n) = self.statement_cache {
            b = b.statement_cache(n);
        }
        macro_rules! durations {
            ($($field:ident),*) => {
                $(if let Some(d) = self.$field { b = b.$field(d); })*
            };
        }
        durations!(
            wait_timeout,
            create_timeout,
            recycle_timeout,
            statement_timeout,
            tcp_keepalive,
            tcp_user_timeout,
            max_lifetime,
            idle_timeout
        );
        if let Some(sql) = &self.on_connect {
            B::add_on_connect(&mut b.options, sql.clone());
        }
        B::apply_config(b, self)
    }

    /// Builds the pool (no connection is opened until first use).
    pub fn build<B: Backend>(&self) -> Result<Pool<B>, Error> {
        self.builder::<B>()?.build()
    }
}

/// A row-count threshold: a number (`64`, `"64"`) or `"off"`.
fn threshold<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<usize>>, D::Error> {
    struct Threshold;
    impl serde::de::Visitor<'_> for Threshold {
        type Value = Option<Option<usize>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a row count or \"off\"")
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
            usize::try_from(n)
                .map(|n| Some(Some(n)))
                .map_err(|_| E::custom("row count too large"))
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
            let n = u64::try_from(n).map_err(|_| E::custom("a row count cannot be negative"))?;
            self.visit_u64(n)
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
            let s = s.trim();
            if s.eq_ignore_ascii_case("off") {
                return Ok(Some(None));
            }
            s.parse::<u64>()
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Str(s), &self))
                .and_then(|n| self.visit_u64(n))
        }
    }
    d.deserialize_any(Threshold)
}
