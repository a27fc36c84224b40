//! Several MySQL / MariaDB hosts for one pool (see
//! [Several hosts](super#several-hosts-failover)): the URL form
//! `mysql://user@a:3306,b:3306,c/db` and
//! [`PoolBuilder::hosts`](crate::PoolBuilder::hosts), parsed into
//! `(host, port)` pairs.

use crate::error::{Error, Kind};

/// The port of a host named without one.
pub(crate) const DEFAULT_PORT: u16 = 3306;

/// One host of a list: a name or address, and its TCP port.
pub(crate) type Host = (String, u16);

fn bad(message: String) -> Error {
    Error::new(Kind::Config, message)
}

/// Parses one `host`, `host:port`, `[v6]` or `[v6]:port` entry.
pub(crate) fn parse_host(entry: &str) -> Result<Host, Error> {
    let entry = entry.trim();
    let invalid = |why: &str| bad(format!("invalid MySQL host {entry:?}: {why}"));
    if entry.is_empty() {
        return Err(invalid("empty host name"));
    }
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(invalid("no `]` after the IPv6 address"));
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(invalid("expected `:port` after `]`")),
            },
        }
    } else {
        match entry.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Err(invalid("write an IPv6 address in brackets: [::1]:3306"));
            }
            Some((host, port)) => (host, Some(port)),
            None => (entry, None),
        }
    };
    if host.is_empty() {
        return Err(invalid("empty host name"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| invalid("the port must be a number from 1 to 65535"))?,
    };
    Ok((host.to_owned(), port))
}

/// Takes a host list out of a MySQL URL: for `mysql://u:p@a:1,b:2/db?x`
/// the URL with its first host only (`mysql://u:p@a:1/db?x`, for
/// mysql_async's parser) and every host, in order. A URL with one host is
/// returned as it is, with an empty list.
pub(crate) fn split_hosts(url: &str) -> Result<(String, Vec<Host>), Error> {
    let Some(scheme_end) = url.find("://") else {
        return Ok((url.to_owned(), Vec::new()));
    };
    let start = scheme_end + 3;
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    let hosts_start = authority.rfind('@').map_or(start, |at| start + at + 1);
    let list = &url[hosts_start..end];
    if !list.contains(',') {
        return Ok((url.to_owned(), Vec::new()));
    }
    let hosts = list
        .split(',')
        .map(parse_host)
        .collect::<Result<Vec<Host>, Error>>()?;
    let first = list.split(',').next().unwrap_or_default().trim();
    let rest = format!("{}{first}{}", &url[..hosts_start], &url[end..]);
    Ok((rest, hosts))
}

#[cfg(test)]
mod tests {
    use super::{parse_host, split_hosts};

    #[test]
    fn host_entries() {
        assert_eq!(parse_host("db1").unwrap(), ("db1".into(), 3306));
        assert_eq!(parse_host(" db1:3307 ").unwrap(), ("db1".into(), 3307));
        assert_eq!(parse_host("[::1]:3310").unwrap(), ("::1".into(), 3310));
        assert_eq!(parse_host("[fe80::1]").unwrap(), ("fe80::1".into(), 3306));
        for bad in [
            "", ":3306", "db:", "db:0", "db:70000", "db:x", "::1", "[::1", "[::1]x",
        ] {
            let e = parse_host(bad).unwrap_err();
            assert!(e.is_config(), "{bad:?}: {e}");
            assert!(e.to_string().contains("invalid MySQL host"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_url_with_several_hosts() {
        let (url, hosts) = split_hosts("mysql://app:p%40ss@a:3307,b,[::1]:3309/db?x=1").unwrap();
        assert_eq!(url, "mysql://app:p%40ss@a:3307/db?x=1");
        assert_eq!(
            hosts,
            vec![
                ("a".to_string(), 3307),
                ("b".to_string(), 3306),
                ("::1".to_string(), 3309)
            ]
        );
        let (url, hosts) = split_hosts("mysql://a,b").unwrap();
        assert_eq!((url.as_str(), hosts.len()), ("mysql://a", 2));
        // One host: untouched.
        let (url, hosts) = split_hosts("mysql://app@a:3307/db?x=a,b").unwrap();
        assert_eq!(
            (url.as_str(), hosts.len()),
            ("mysql://app@a:3307/db?x=a,b", 0)
        );
        assert!(split_hosts("mysql://app@a,,b/db").unwrap_err().is_config());
    }
}
