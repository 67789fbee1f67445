//! MAC addresses as text, as BESS's `Ethernet::Address::FromString` and `ToString`
//! (`core/utils/ether.cc`) read and write them.

/// Parses "aa:bb:cc:dd:ee:ff": exactly six octets separated by ':', each one or two hex
/// digits of either case. Anything else is refused: another number of octets, an empty or
/// longer octet, a sign, a `0x` prefix, another separator, spaces or trailing text.
///
/// BESS reads the address with `sscanf("%2hhx:...")`, which also lets through spaces or a
/// sign before an octet and text after the sixth; those are refused here (Bessemer's earlier
/// parsers refused them too, but for a '+' sign).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in out.iter_mut() {
        let p = parts.next()?;
        if !(1..=2).contains(&p.len()) || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    match parts.next() {
        Some(_) => None,
        None => Some(out),
    }
}

/// Formats an address as BESS does: six two-digit lowercase hex octets joined by ':'.
pub fn format_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted() {
        for (s, want) in [
            ("aa:bb:cc:dd:ee:ff", [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]),
            ("AA:Bb:cC:DD:eE:Ff", [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]),
            ("00:00:00:00:00:00", [0; 6]),
            ("ff:ff:ff:ff:ff:ff", [0xff; 6]),
            ("1:2:3:4:5:6", [1, 2, 3, 4, 5, 6]),
            ("0:a:0b:C:d0:f", [0, 0x0a, 0x0b, 0x0c, 0xd0, 0x0f]),
            ("02:00:00:00:00:01", [2, 0, 0, 0, 0, 1]),
        ] {
            assert_eq!(parse_mac(s), Some(want), "{s:?}");
        }
    }

    #[test]
    fn refused() {
        for s in [
            "",
            ":",
            ":::::",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:ff:00",
            "aa:bb:cc:dd:ee:ff:",
            ":aa:bb:cc:dd:ee:ff",
            "aa:bb:cc:dd:ee:",
            "aa::cc:dd:ee:ff",
            "aaa:bb:cc:dd:ee:ff",
            "0aa:bb:cc:dd:ee:ff",
            "000a:bb:cc:dd:ee:ff",
            "aa:bb:cc:dd:ee:fff",
            "+a:bb:cc:dd:ee:ff",
            "+0a:bb:cc:dd:ee:ff",
            "-1:bb:cc:dd:ee:ff",
            "0x:bb:cc:dd:ee:ff",
            "0xa:bb:cc:dd:ee:ff",
            "gg:bb:cc:dd:ee:ff",
            " aa:bb:cc:dd:ee:ff",
            "aa:bb:cc:dd:ee:ff ",
            "aa: bb:cc:dd:ee:ff",
            "aa:bb:cc:dd:ee:ff\n",
            "aa-bb-cc-dd-ee-ff",
            "aa.bb.cc.dd.ee.ff",
            "aabb.ccdd.eeff",
            "aabbccddeeff",
            "aa:bb:cc:dd:ee:ｆ",
            "not-a-mac",
        ] {
            assert_eq!(parse_mac(s), None, "{s:?}");
        }
    }

    #[test]
    fn formatted_as_bess() {
        assert_eq!(
            format_mac(&[0xaa, 0x0b, 0, 0xff, 0x10, 1]),
            "aa:0b:00:ff:10:01"
        );
        for s in ["1:2:3:4:5:6", "AA:bb:0C:d:Ee:ff"] {
            let m = parse_mac(s).unwrap();
            assert_eq!(parse_mac(&format_mac(&m)), Some(m));
        }
    }
}
