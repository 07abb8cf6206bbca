//! Stable, dependency-free hashing for identities picolet must keep across restarts and
//! versions: static pod UIDs (FNV-1a 128) and container spec hashes (FNV-1a 64).
//!
//! The inputs are canonical JSON (object keys sorted, no whitespace), so the same document
//! always hashes the same regardless of YAML formatting, key order or comments.

const FNV64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV64_PRIME: u64 = 0x0000_0100_0000_01b3;
const FNV128_OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV128_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

pub fn fnv1a64(parts: &[&[u8]]) -> u64 {
    let mut h = FNV64_OFFSET;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV64_PRIME);
        }
    }
    h
}

pub fn fnv1a128(parts: &[&[u8]]) -> u128 {
    let mut h = FNV128_OFFSET;
    for p in parts {
        for &b in *p {
            h ^= u128::from(b);
            h = h.wrapping_mul(FNV128_PRIME);
        }
    }
    h
}

/// Canonical JSON text of a value: serde_json's map keeps keys sorted, and `to_string` writes
/// no whitespace.
pub fn canonical_json(v: &serde_json::Value) -> String {
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_known_vectors() {
        // Published FNV-1a test vectors.
        assert_eq!(fnv1a64(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(&[b"foobar"]), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a128(&[b""]), FNV128_OFFSET);
        assert_eq!(fnv1a128(&[b"a"]), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
    }

    #[test]
    fn parts_concatenate() {
        assert_eq!(fnv1a64(&[b"foo", b"bar"]), fnv1a64(&[b"foobar"]));
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":{"d":2,"c":3}}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{ "a": {"c":3, "d":2}, "b": 1 }"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"c":3,"d":2},"b":1}"#);
    }
}
