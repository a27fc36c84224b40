//! The connection-string parameters batchpool reads itself (PostgreSQL's
//! `statements=` and the libpq TLS parameters tokio-postgres does not know,
//! MySQL's `ssl-mode=`...): taken out of a URL or a libpq `key=value`
//! string, the rest left as it was for the driver.

use std::borrow::Cow;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, Kind};

/// Removes every parameter named in `keys` from a connection string (URL or
/// key-value form) and returns the rest with the removed `(key, value)`
/// pairs, in order (URL values percent-decoded, key-value values unquoted).
pub(crate) fn take(config: &str, keys: &[&str]) -> (String, Vec<(String, String)>) {
    if is_url(config) {
        take_url(config, keys)
    } else {
        take_key_value(config, keys)
    }
}

/// Appends `key=value` to a connection string of either form. `value` must
/// need no quoting or escaping (batchpool only appends its own keywords).
#[cfg(feature = "postgres")]
pub(crate) fn append(config: &str, key: &str, value: &str) -> String {
    if is_url(config) {
        let sep = if config.contains('?') { '&' } else { '?' };
        format!("{config}{sep}{key}={value}")
    } else if config.trim().is_empty() {
        format!("{key}={value}")
    } else {
        format!("{} {key}={value}", config.trim_end())
    }
}

/// `Display` for a parameter's value type, as its `as_str` name.
macro_rules! display_as_str {
    ($ty:ty) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use display_as_str;

/// The value among `all` whose name (`name`) is `s` (ASCII case ignored
/// with `any_case`), else a config error naming parameter `key` and every
/// name it takes.
pub(crate) fn parse_name<T: Copy>(
    key: &str,
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    any_case: bool,
) -> Result<T, Error> {
    let fits = |n: &str| {
        if any_case {
            n.eq_ignore_ascii_case(s)
        } else {
            n == s
        }
    };
    if let Some(&value) = all.iter().find(|&&v| fits(name(v))) {
        return Ok(value);
    }
    let names: Vec<&str> = all.iter().map(|&v| name(v)).collect();
    let (last, rest) = names.split_last().expect("a parameter takes some value");
    Err(Error::new(
        Kind::Config,
        format!(
            "invalid {key}={s:?}: expected {} or {last}",
            rest.join(", ")
        ),
    ))
}

/// The TLS parameters of a connection string: the mode and the files of
/// the roots to trust, the client certificate and its key.
pub(crate) struct TlsParams<M> {
    pub(crate) mode: Option<M>,
    pub(crate) root_cert: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

/// Takes the TLS parameters named `keys` (mode, roots, certificate, key)
/// out of a connection string and returns the rest with them; the last
/// one named wins. A certificate without its key (or a key without its
/// certificate) is an error.
pub(crate) fn take_tls<M: FromStr<Err = Error>>(
    config: &str,
    keys: &[&str; 4],
) -> Result<(String, TlsParams<M>), Error> {
    let (rest, taken) = take(config, keys);
    let mut tls = TlsParams {
        mode: None,
        root_cert: None,
        cert: None,
        key: None,
    };
    for (key, value) in taken {
        match keys.iter().position(|k| *k == key) {
            Some(0) => tls.mode = Some(value.parse()?),
            Some(1) => tls.root_cert = Some(value.into()),
            Some(2) => tls.cert = Some(value.into()),
            _ => tls.key = Some(value.into()),
        }
    }
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(Error::new(
            Kind::Config,
            format!(
                "{} and {} go together: give both files or neither",
                keys[2], keys[3]
            ),
        ));
    }
    Ok((rest, tls))
}

/// `scheme://...`; anything else is a `key=value` string.
fn is_url(config: &str) -> bool {
    config.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    })
}

fn take_url(url: &str, keys: &[&str]) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), Vec::new());
    };
    let mut taken = Vec::new();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((key, value)) if keys.contains(&key) => {
                let value: Cow<'_, str> = percent_encoding::percent_decode_str(value)
                    .decode_utf8()
                    .unwrap_or(Cow::Borrowed(value));
                taken.push((key.to_string(), value.into_owned()));
            }
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, taken)
}

/// `key=value` pairs separated by whitespace, values optionally in single
/// quotes with backslash escapes (libpq's format). Text that is not such a
/// pair is kept as it is, for tokio-postgres to report.
fn take_key_value(config: &str, keys: &[&str]) -> (String, Vec<(String, String)>) {
    let next = |pos: usize| config[pos..].chars().next();
    let skip_space = |mut pos: usize| {
        while let Some(c) = next(pos).filter(|c| c.is_whitespace()) {
            pos += c.len_utf8();
        }
        pos
    };
    let mut taken = Vec::new();
    let mut kept: Vec<&str> = Vec::new();
    let mut pos = skip_space(0);
    while pos < config.len() {
        let start = pos;
        while let Some(c) = next(pos).filter(|&c| c != '=' && !c.is_whitespace()) {
            pos += c.len_utf8();
        }
        let key = &config[start..pos];
        pos = skip_space(pos);
        let mut value = String::new();
        if next(pos) == Some('=') {
            pos = skip_space(pos + 1);
            let quoted = next(pos) == Some('\'');
            if quoted {
                pos += 1;
            }
            while let Some(c) = next(pos) {
                if !quoted && c.is_whitespace() {
                    break;
                }
                pos += c.len_utf8();
                match c {
                    '\\' => {
                        if let Some(e) = next(pos) {
                            value.push(e);
                            pos += e.len_utf8();
                        }
                    }
                    '\'' if quoted => break,
                    c => value.push(c),
                }
            }
        }
        if keys.contains(&key) {
            taken.push((key.to_string(), value));
        } else {
            kept.push(&config[start..pos]);
        }
        pos = skip_space(pos);
    }
    (kept.join(" "), taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_are_parsed_and_listed() {
        let name = |n: usize| ["one", "two", "three"][n];
        assert_eq!(parse_name("k", "TWO", &[0, 1, 2], name, true).unwrap(), 1);
        assert!(parse_name("k", "TWO", &[0, 1, 2], name, false).is_err());
        let e = parse_name("k", "four", &[0, 1, 2], name, false).unwrap_err();
        assert!(e.is_config());
        assert!(
            e.to_string()
                .contains(r#"invalid k="four": expected one, two or three"#),
            "{e}"
        );
    }

    #[test]
    fn values_are_decoded_and_unquoted() {
        // URL values are percent-decoded, key-value ones unquoted.
        let cases = [
            (
                "postgresql://u@h/db?sslrootcert=%2Ftmp%2Fca%20x.pem&x=1&sslmode=verify-full",
                "postgresql://u@h/db?x=1",
                [("sslrootcert", "/tmp/ca x.pem"), ("sslmode", "verify-full")],
            ),
            (
                "host=h sslrootcert='/tmp/a b\\'c.pem' user=u sslmode = verify-ca",
                "host=h user=u",
                [("sslrootcert", "/tmp/a b'c.pem"), ("sslmode", "verify-ca")],
            ),
        ];
        for (config, rest, taken) in cases {
            assert_eq!(
                take(config, &["sslrootcert", "sslmode"]),
                (rest.to_owned(), pairs(&taken)),
                "{config}"
            );
        }
    }

    #[test]
    #[cfg(feature = "postgres")]
    fn append_to_either_form() {
        assert_eq!(append("postgres://h/db", "k", "v"), "postgres://h/db?k=v");
        assert_eq!(
            append("postgres://h/db?a=1", "k", "v"),
            "postgres://h/db?a=1&k=v"
        );
        assert_eq!(append("host=h ", "k", "v"), "host=h k=v");
        assert_eq!(append("", "k", "v"), "k=v");
    }
}
