//! Which network addresses a fetch may connect to, and the DNS resolver that enforces it.
//!
//! The check runs inside the HTTP client's resolver, on the addresses it is about to connect to,
//! so a name cannot pass a check and then resolve elsewhere (DNS rebinding). IP-literal hosts never
//! reach a resolver: the allowlist refuses them before any request is built.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Never reachable: the cloud metadata server lives in link-local, and the rest cannot be a
/// photo server (unspecified, broadcast, multicast, reserved, documentation).
const ALWAYS_REFUSED: &[IpNet] = &[
    v4(0, 0, 0, 0, 8),
    v4(169, 254, 0, 0, 16),
    v4(192, 0, 0, 0, 24),
    v4(192, 0, 2, 0, 24),
    v4(198, 18, 0, 0, 15),
    v4(198, 51, 100, 0, 24),
    v4(203, 0, 113, 0, 24),
    v4(224, 0, 0, 0, 4),
    v4(240, 0, 0, 0, 4),
    v6(Ipv6Addr::UNSPECIFIED, 128),
    v6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
    v6(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),
    v6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
    v6(Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0), 32),
    // Teredo hides an IPv4 address that cannot be vouched for.
    v6(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32),
];

/// Reachable only with `CLIPFN_ALLOW_PRIVATE_SOURCES=true` (tests and local stacks).
const PRIVATE: &[IpNet] = &[
    v4(10, 0, 0, 0, 8),
    v4(100, 64, 0, 0, 10),
    v4(127, 0, 0, 0, 8),
    v4(172, 16, 0, 0, 12),
    v4(192, 168, 0, 0, 16),
    v6(Ipv6Addr::LOCALHOST, 128),
    v6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
];

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> IpNet {
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len))
}

const fn v6(ip: Ipv6Addr, len: u8) -> IpNet {
    IpNet::V6(Ipv6Net::new_assert(ip, len))
}

/// Why an address may not be connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Loopback, private, CGNAT or unique-local: allowed with `CLIPFN_ALLOW_PRIVATE_SOURCES`.
    Private,
    /// Link-local (the metadata server), multicast, unspecified, reserved: never allowed.
    Never,
}

/// The IPv4 address an IPv6 address carries, for the forms that route to it: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = ip.to_bits();
    let low = Ipv4Addr::from_bits(bits as u32);
    match ip.segments() {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] if bits > 1 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from_bits((u32::from(hi) << 16) | u32::from(lo))),
        _ => None,
    }
}

/// Classifies one address: `None` means it is a public address and may be connected to.
pub fn refusal(ip: IpAddr) -> Option<Refusal> {
    if let IpAddr::V6(v6) = ip
        && let Some(v4) = embedded_v4(v6)
    {
        return refusal(IpAddr::V4(v4));
    }
    if ALWAYS_REFUSED.iter().any(|net| net.contains(&ip)) {
        Some(Refusal::Never)
    } else if PRIVATE.iter().any(|net| net.contains(&ip)) {
        Some(Refusal::Private)
    } else {
        None
    }
}

/// The resolver error that turns into `forbidden`: the name resolved to a refused address.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves to {ip}, a non-public address")]
pub struct RefusedAddress {
    pub host: String,
    pub ip: IpAddr,
}

/// The system resolver (getaddrinfo), keeping a name only if every address it has is allowed:
/// a name with one refused address is refused whole, so no address order can sneak it through.
pub struct GuardedResolver {
    pub allow_private: bool,
}

fn allowed(ip: IpAddr, allow_private: bool) -> bool {
    match refusal(ip) {
        None => true,
        Some(Refusal::Private) => allow_private,
        Some(Refusal::Never) => false,
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(refused) = addrs.iter().find(|a| !allowed(a.ip(), allow_private)) {
                return Err(RefusedAddress { host, ip: refused.ip() }.into());
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok::<_, BoxError>(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ip: &str) -> Option<Refusal> {
        refusal(ip.parse().unwrap())
    }

    #[test]
    fn public_addresses_pass() {
        for ip in ["8.8.8.8", "142.250.74.91", "100.128.0.1", "172.32.0.1", "2607:f8b0:4004:c07::80", "2002:808:808::1"]
        {
            assert_eq!(class(ip), None, "{ip}");
        }
    }

    #[test]
    fn private_ranges_need_the_setting() {
        for ip in ["127.0.0.1", "127.255.0.9", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "::1", "fd00::1"]
        {
            assert_eq!(class(ip), Some(Refusal::Private), "{ip}");
        }
    }

    #[test]
    fn metadata_multicast_and_unspecified_never_pass() {
        for ip in ["169.254.169.254", "0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "fe80::1", "ff02::1"] {
            assert_eq!(class(ip), Some(Refusal::Never), "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_of_ipv4_are_judged_by_their_ipv4() {
        assert_eq!(class("::ffff:127.0.0.1"), Some(Refusal::Private));
        assert_eq!(class("::ffff:7f00:1"), Some(Refusal::Private));
        assert_eq!(class("::ffff:169.254.169.254"), Some(Refusal::Never));
        assert_eq!(class("::127.0.0.1"), Some(Refusal::Private));
        assert_eq!(class("64:ff9b::a9fe:a9fe"), Some(Refusal::Never));
        assert_eq!(class("2002:a9fe:a9fe::1"), Some(Refusal::Never));
        assert_eq!(class("2002:7f00:1::"), Some(Refusal::Private));
        assert_eq!(class("::ffff:8.8.8.8"), None);
    }

    #[test]
    fn the_resolver_refuses_loopback_unless_allowed() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let resolve = |allow_private| {
            let name: Name = "localhost".parse().unwrap();
            runtime.block_on(GuardedResolver { allow_private }.resolve(name))
        };
        let err = resolve(false).err().expect("localhost is loopback");
        assert!(err.downcast_ref::<RefusedAddress>().is_some(), "{err}");
        assert!(resolve(true).unwrap().all(|a| a.ip().is_loopback()));
    }
}
