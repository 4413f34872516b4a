//! The values a Conditional set matches on: host names, paths, header names, methods,
//! regular expressions and source networks, each checked the way the proxy will use it.

use std::net::IpAddr;

use serde_spanned::Spanned;

use crate::config::issues::Issues;
use crate::config::model::StrMatch;

/// True for an HTTP token character (RFC 9110 `tchar`): methods, header names and cookie
/// names are tokens.
pub(in crate::config) fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// True for a non-empty HTTP token.
pub(in crate::config) fn is_token(text: &str) -> bool {
    !text.is_empty() && text.chars().all(is_tchar)
}

/// `host`: an exact name (compared case-insensitively, stored lower case) or `*.suffix`,
/// which matches every name ending in `.suffix`.
pub(in crate::config) fn host(
    value: &Spanned<String>,
    field: &str,
    issues: &mut Issues,
) -> Option<StrMatch> {
    let text = value.get_ref().trim().to_ascii_lowercase();
    let (wild, name) = match text.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let bracketed = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .is_some_and(|inner| inner.parse::<std::net::Ipv6Addr>().is_ok());
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_');
    if !(plain || (bracketed && !wild)) {
        issues.error(
            &value.span(),
            field,
            format!(
                "`{}` is not a host name: write a name without port (api.example.com) or \
                 `*.example.com` for every name under example.com",
                value.get_ref()
            ),
        );
        return None;
    }
    Some(if wild {
        StrMatch::Suffix(format!(".{name}"))
    } else {
        StrMatch::Exact(name.to_owned())
    })
}

/// A path to match exactly or as a prefix: must start with `/` and hold no space.
pub(in crate::config) fn path(
    value: &Spanned<String>,
    field: &str,
    issues: &mut Issues,
) -> Option<String> {
    let text = value.get_ref();
    if text.starts_with('/') && !text.contains(char::is_whitespace) {
        return Some(text.clone());
    }
    issues.error(
        &value.span(),
        field,
        format!("`{text}` must start with `/` and contain no spaces"),
    );
    None
}

/// A string to match as a suffix or an exact header value: anything but empty.
pub(in crate::config) fn non_empty(
    value: &Spanned<String>,
    field: &str,
    issues: &mut Issues,
) -> Option<String> {
    if value.get_ref().is_empty() {
        issues.error(&value.span(), field, "must not be empty");
        return None;
    }
    Some(value.get_ref().clone())
}

/// A regular expression in the syntax of the `regex` crate; it must compile.
pub(in crate::config) fn regex(
    value: &Spanned<String>,
    field: &str,
    issues: &mut Issues,
) -> Option<String> {
    match regex::Regex::new(value.get_ref()) {
        Ok(_) => Some(value.get_ref().clone()),
        Err(error) => {
            // The crate's message spans lines (pattern, caret, cause): keep the cause.
            let text = error.to_string();
            let cause = text
                .lines()
                .find_map(|line| line.strip_prefix("error: "))
                .unwrap_or(&text)
                .to_owned();
            issues.error(
                &value.span(),
                field,
                format!(
                    "`{}` is not a valid regular expression: {cause}",
                    value.get_ref()
                ),
            );
            None
        }
    }
}

/// A header name: an HTTP token, stored lower case (names are case-insensitive).
pub(in crate::config) fn header_name(
    value: &Spanned<String>,
    field: &str,
    issues: &mut Issues,
) -> Option<String> {
    if is_token(value.get_ref()) {
        return Some(value.get_ref().to_ascii_lowercase());
    }
    issues.error(
        &value.span(),
        field,
        format!("`{}` is not an HTTP header name", value.get_ref()),
    );
    None
}

/// `method`: a non-empty list of upper-case tokens, each once.
pub(in crate::config) fn methods(
    list: &Spanned<Vec<Spanned<String>>>,
    field: &str,
    issues: &mut Issues,
) -> Option<Vec<String>> {
    let before = issues.error_count();
    if list.get_ref().is_empty() {
        issues.error(&list.span(), field, "list at least one method");
    }
    let mut methods: Vec<String> = Vec::new();
    for (index, method) in list.get_ref().iter().enumerate() {
        let text = method.get_ref();
        let here = format!("{field}[{index}]");
        if !is_token(text) || text.chars().any(|c| c.is_ascii_lowercase()) {
            let problem = format!("`{text}` is not an upper-case HTTP method (e.g. GET)");
            issues.error(&method.span(), &here, problem);
        } else if methods.contains(text) {
            issues.error(&method.span(), &here, format!("`{text}` is listed twice"));
        } else {
            methods.push(text.clone());
        }
    }
    (issues.error_count() == before).then_some(methods)
}

/// `source_cidr`: a non-empty list of networks `ADDRESS/LENGTH` (a bare address is a
/// single host); host bits must be zero, so that a typo does not widen or move a network.
pub(in crate::config) fn networks(
    list: &Spanned<Vec<Spanned<String>>>,
    field: &str,
    issues: &mut Issues,
) -> Option<Vec<(IpAddr, u8)>> {
    let before = issues.error_count();
    if list.get_ref().is_empty() {
        issues.error(&list.span(), field, "list at least one network");
    }
    let mut networks = Vec::new();
    for (index, item) in list.get_ref().iter().enumerate() {
        match network(item.get_ref()) {
            Ok(net) => networks.push(net),
            Err(problem) => issues.error(&item.span(), &format!("{field}[{index}]"), problem),
        }
    }
    (issues.error_count() == before).then_some(networks)
}

/// Parses one network, or says what is wrong with it.
fn network(text: &str) -> Result<(IpAddr, u8), String> {
    let (address, length) = match text.trim().split_once('/') {
        Some((address, length)) => (address, Some(length)),
        None => (text.trim(), None),
    };
    let Ok(address) = address.parse::<IpAddr>() else {
        return Err(format!("`{text}` is not a network: write ADDRESS/LENGTH"));
    };
    let max: u8 = if address.is_ipv4() { 32 } else { 128 };
    let length = match length.map(str::parse::<u8>) {
        None => max,
        Some(Ok(length)) if length <= max => length,
        Some(_) => {
            return Err(format!(
                "`{text}`: the prefix length must be a number in 0..={max}"
            ));
        }
    };
    let network = masked(address, length);
    if network != address {
        return Err(format!(
            "`{text}` has host bits set: write {network}/{length} (or {address}/{max} for \
             one host)"
        ));
    }
    Ok((address, length))
}

/// The address with every bit after the first `length` cleared.
fn masked(address: IpAddr, length: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(length)).unwrap_or(0);
            IpAddr::from((u32::from(v4) & mask).to_be_bytes())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(length)).unwrap_or(0);
            IpAddr::from((u128::from(v6) & mask).to_be_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_parse_and_reject_host_bits() {
        assert_eq!(network("10.0.0.0/8"), Ok((ip("10.0.0.0"), 8)));
        assert_eq!(network("::1/128"), Ok((ip("::1"), 128)));
        assert_eq!(network("0.0.0.0/0"), Ok((ip("0.0.0.0"), 0)));
        assert_eq!(network("::/0"), Ok((ip("::"), 0)));
        assert_eq!(network("192.0.2.7"), Ok((ip("192.0.2.7"), 32)));
        assert_eq!(network("fd00:1::/32"), Ok((ip("fd00:1::"), 32)));
        let err = network("10.1.2.3/8").unwrap_err();
        assert!(err.contains("host bits set: write 10.0.0.0/8"), "{err}");
        assert!(network("fd00::1/16").unwrap_err().contains("fd00::/16"));
        assert!(network("10.0.0.0/33").unwrap_err().contains("0..=32"));
        assert!(network("10.0.0/8").unwrap_err().contains("not a network"));
        assert!(network("::/129").unwrap_err().contains("0..=128"));
    }

    #[test]
    fn masks_keep_only_the_prefix() {
        assert_eq!(masked(ip("10.255.255.255"), 8), ip("10.0.0.0"));
        assert_eq!(masked(ip("10.255.255.255"), 0), ip("0.0.0.0"));
        assert_eq!(masked(ip("10.255.255.255"), 32), ip("10.255.255.255"));
        assert_eq!(masked(ip("fd00::ffff"), 112), ip("fd00::"));
    }

    #[test]
    fn tokens() {
        assert!(is_token("GET"));
        assert!(is_token("X-Env"));
        assert!(!is_token(""));
        assert!(!is_token("a b"));
        assert!(!is_token("a:b"));
        assert!(!is_token("é"));
    }
}
