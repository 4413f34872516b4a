//! `[[dns_vservice]]` (S-GS): the example, defaults, and errors naming field and line.

use std::time::Duration;

use super::*;

fn problems(text: &str) -> Vec<String> {
    match parse_with_warnings(text, "d.toml") {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

/// S-GS: the shipped example's DNS vService reads as its comments say.
#[test]
fn s_gs_example_dns_vservice() {
    let text = include_str!("../../../conf/example.toml");
    let config = parse_with_warnings(text, "example.toml").unwrap().0;
    let dns = &config.dns_vservices[0];
    assert_eq!((dns.name.as_str(), dns.port, dns.ttl), ("gslb", 53, 10));
    assert_eq!(dns.zone, "gslb.example.com.");
    let www = &dns.records[0];
    assert_eq!(www.name, "www.gslb.example.com.");
    assert_eq!(www.policy, DnsPolicy::LeastLoaded);
    let standby: Vec<(&str, bool)> = www
        .sites
        .iter()
        .map(|s| (s.name.as_str(), s.standby))
        .collect();
    assert_eq!(
        standby,
        [("paris", false), ("lyon", false), ("marseille", true)]
    );
    assert_eq!(www.sites[0].ipv6, Some("2001:db8:1::10".parse().unwrap()));
    assert_eq!(
        www.sites[0].token.as_deref(),
        Some("paris-api-token-0123456789")
    );
}

/// S-GS: defaults (port 53, TTL 30, poll 2 s / 1 s, 50 q/s, round robin, 1 answer).
#[test]
fn s_gs_dns_vservice_defaults() {
    let text = "[[dns_vservice]]\nname = \"g\"\naddress = \"127.0.0.1\"\nzone = \"Z.Test.\"\n\
                [[dns_vservice.record]]\nname = \"@\"\n[[dns_vservice.record.site]]\n\
                name = \"a\"\naddress = \"192.0.2.1\"\napi = \"http://127.0.0.1:9181/\"\n\
                vservice = \"web\"\n";
    let config = parse_with_warnings(text, "d.toml").unwrap().0;
    let dns = &config.dns_vservices[0];
    assert_eq!((dns.port, dns.ttl, dns.rate_limit), (53, 30, 50));
    assert_eq!(
        (dns.poll_period, dns.poll_timeout),
        (Duration::from_secs(2), Duration::from_secs(1))
    );
    assert_eq!(dns.zone, "z.test.");
    let record = &dns.records[0];
    assert_eq!(
        (record.name.as_str(), record.policy, record.answers),
        ("z.test.", DnsPolicy::RoundRobin, 1)
    );
    let site = &record.sites[0];
    assert_eq!(
        (site.api.as_str(), site.weight, site.standby),
        ("http://127.0.0.1:9181", 1, false)
    );
}

/// Every problem is reported with its line and field path.
#[test]
fn s_gs_dns_vservice_errors_name_field_and_line() {
    let text = "[api]\nlisten = \"127.0.0.1:5300\"\n\
                [[dns_vservice]]\nname = \"g\"\naddress = \"127.0.0.1\"\nport = 5300\n\
                zone = \"bad..zone\"\npoll_period = 0.01\n\
                [[dns_vservice.record]]\nname = \"www\"\npolicy = \"fastest\"\n";
    let errors = problems(text);
    // The unreadable `policy` does not hide the other problems: all are reported at once.
    assert_eq!(errors.len(), 5, "{errors:?}");
    assert!(errors[0].contains("d.toml:6:8: dns_vservice[0].port: 127.0.0.1:5300 is also the API"));
    assert!(errors[1].contains("d.toml:7:8: dns_vservice[0].zone: `bad..zone` is not a domain"));
    assert!(errors[2].contains("d.toml:8:15: dns_vservice[0].poll_period: 0.01 s is out of range"));
    assert!(errors[3].contains("d.toml:9:1: dns_vservice[0].record[0].site: a record needs"));
    assert!(
        errors[4]
            .contains("d.toml:11:10: dns_vservice[0].record[0].policy: unknown variant `fastest`"),
        "{errors:?}"
    );

    let text = "[api]\nlisten = \"127.0.0.1:5300\"\n\
                [[dns_vservice]]\nname = \"g\"\naddress = \"127.0.0.1\"\nport = 5300\n\
                zone = \"bad..zone\"\npoll_period = 0.01\n\
                [[dns_vservice.record]]\nname = \"www.elsewhere.\"\n\
                [[dns_vservice.record.site]]\nname = \"a\"\naddress = \"x\"\napi = \"https://h:1\"\n\
                vservice = \"web\"\nstandby = true\nweight = 0\n";
    let errors = problems(text);
    let expect = [
        "d.toml:6:8: dns_vservice[0].port: 127.0.0.1:5300 is also the API listener",
        "d.toml:7:8: dns_vservice[0].zone: `bad..zone` is not a domain name",
        "d.toml:8:15: dns_vservice[0].poll_period: 0.01 s is out of range",
        "d.toml:11:1: dns_vservice[0].record[0].site: every site is a standby",
        "d.toml:13:11: dns_vservice[0].record[0].site[0].address: `x` is not an IPv4",
        "d.toml:14:7: dns_vservice[0].record[0].site[0].api: `https://h:1` is not a site API URL",
        "d.toml:17:10: dns_vservice[0].record[0].site[0].weight: 0 is out of range 1..=1000",
    ];
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    for (got, want) in errors.iter().zip(expect) {
        assert!(got.starts_with(want), "{got}\n  wanted {want}");
    }
}

/// A DNS vService's name is in the vService namespace, and it needs a name to answer.
#[test]
fn s_gs_dns_vservice_name_clash_and_empty() {
    let text = "[[backend_service]]\nname = \"b\"\naddress = \"127.0.0.1\"\nport = 80\n\
                [[vservice]]\nname = \"v\"\nkind = \"http\"\naddress = \"127.0.0.1\"\nport = 8080\n\
                backends = [\"b\"]\n\
                [[dns_vservice]]\nname = \"v\"\naddress = \"127.0.0.1\"\nport = 8080\nzone = \"z\"\n";
    let errors = problems(text);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors[0].starts_with("d.toml:11:1: dns_vservice[0].record: a dns vservice needs"),
        "{errors:#?}"
    );
    assert!(errors[1].contains(
        "12:8: dns_vservice[0].name: duplicate name `v`: already used by the vservice at line 6"
    ));
    assert!(errors[2].contains("14:8: dns_vservice[0].port: conflicts with vservice `v` (line 9)"));
}
