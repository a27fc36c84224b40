//! The connection-string parameters batchpool reads itself (PostgreSQL's
//! `statements=` and the libpq TLS parameters tokio-postgres does not know,
//! MySQL's `ssl-mode=`...): taken out of a URL or a libpq `key=value`
//! string, the rest left as it was for the driver.

use std::borrow::Cow;

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
    fn url_values_are_decoded() {
        let (rest, taken) = take(
            "postgresql://u@h/db?sslrootcert=%2Ftmp%2Fca%20x.pem&x=1&sslmode=verify-full",
            &["sslrootcert", "sslmode"],
        );
        assert_eq!(rest, "postgresql://u@h/db?x=1");
        assert_eq!(
            taken,
            pairs(&[("sslrootcert", "/tmp/ca x.pem"), ("sslmode", "verify-full")])
        );
    }

    #[test]
    fn key_value_values_are_unquoted() {
        let (rest, taken) = take(
            "host=h sslrootcert='/tmp/a b\\'c.pem' user=u sslmode = verify-ca",
            &["sslrootcert", "sslmode"],
        );
        assert_eq!(rest, "host=h user=u");
        assert_eq!(
            taken,
            pairs(&[("sslrootcert", "/tmp/a b'c.pem"), ("sslmode", "verify-ca")])
        );
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
