use super::*;
use crate::objects::PodCertificateProjection;
use ring::signature::{self, KeyPair as _};

/// One DER element: tag, content, rest.
fn tlv(b: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = b[0];
    let (len, at) = if b[1] < 0x80 {
        (usize::from(b[1]), 2)
    } else {
        let n = usize::from(b[1] & 0x7f);
        let len = b[2..2 + n]
            .iter()
            .fold(0usize, |a, x| (a << 8) | usize::from(*x));
        (len, 2 + n)
    };
    (tag, &b[at..at + len], &b[at + len..])
}

/// The whole DER element at the start of `b` (tag and length included).
fn element(b: &[u8]) -> &[u8] {
    let (_, _, rest) = tlv(b);
    &b[..b.len() - rest.len()]
}

fn need(key_type: &str) -> PodCertificateNeed {
    PodCertificateNeed {
        namespace: "ns".into(),
        pod_name: "web".into(),
        pod_uid: "uid-1".into(),
        service_account: "sa".into(),
        volume: "tls".into(),
        index: 1,
        source: PodCertificateProjection {
            signer_name: "e2e.example.com/s".into(),
            key_type: key_type.into(),
            credential_bundle_path: "bundle.pem".into(),
            ..Default::default()
        },
    }
}

fn der_of_pem(pem: &[u8], label: &str) -> Vec<u8> {
    let blocks = crate::pki::pem_blocks(pem).unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].0, label);
    blocks[0].1.clone()
}

#[test]
fn keys_and_stub_requests_verify_with_their_own_public_key() {
    const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    const ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
    const ED25519: &[u8] = &[0x2b, 0x65, 0x70];
    for kt in ["ECDSAP256", "ECDSAP384", "ED25519"] {
        let alg = key_algorithm(&need(kt)).unwrap();
        let (key_pem, csr) = new_key(alg).unwrap();
        let pkcs8 = der_of_pem(&key_pem, "PRIVATE KEY");
        // The key as ring reads PKCS#8, and its public half.
        let rng = ring::rand::SystemRandom::new();
        let public: Vec<u8> = match kt {
            "ECDSAP256" => signature::EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
                &pkcs8,
                &rng,
            )
            .unwrap()
            .public_key()
            .as_ref()
            .to_vec(),
            "ECDSAP384" => signature::EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
                &pkcs8,
                &rng,
            )
            .unwrap()
            .public_key()
            .as_ref()
            .to_vec(),
            _ => {
                // Go's v1 form: version 0, the algorithm, the seed alone.
                assert_eq!(pkcs8.len(), 48, "{pkcs8:02x?}");
                assert_eq!(
                    &pkcs8[..16],
                    &[
                        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70,
                        0x04, 0x22, 0x04, 0x20
                    ]
                );
                signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pkcs8)
                    .unwrap()
                    .public_key()
                    .as_ref()
                    .to_vec()
            }
        };
        // CertificationRequest: info, algorithm, signature.
        let (tag, req, rest) = tlv(&csr);
        assert_eq!((tag, rest.len()), (0x30, 0));
        let info = element(req);
        let (_, alg_seq, r) = tlv(&req[info.len()..]);
        let (_, sig_bits, r) = tlv(r);
        assert!(r.is_empty());
        let (_, alg_oid, params) = tlv(alg_seq);
        assert!(params.is_empty(), "no parameters");
        // Version 0, an empty subject, the key, no attributes.
        let (_, fields, _) = tlv(info);
        let (_, version, r) = tlv(fields);
        assert_eq!(version, [0]);
        let (name_tag, name, r) = tlv(r);
        assert_eq!((name_tag, name.len()), (0x30, 0), "an empty subject");
        let (_, spki, r) = tlv(r);
        assert_eq!(r, [0xa0, 0x00], "no attributes");
        let (_, _, bits) = tlv(spki);
        let (_, key_bits, _) = tlv(bits);
        assert_eq!(
            &key_bits[1..],
            public.as_slice(),
            "{kt}: the key's own public half"
        );
        let (verify, want_oid): (&dyn signature::VerificationAlgorithm, &[u8]) = match kt {
            "ECDSAP256" => (&signature::ECDSA_P256_SHA256_ASN1, ECDSA_SHA256),
            "ECDSAP384" => (&signature::ECDSA_P384_SHA384_ASN1, ECDSA_SHA384),
            _ => (&signature::ED25519, ED25519),
        };
        assert_eq!(alg_oid, want_oid, "{kt}");
        signature::UnparsedPublicKey::new(verify, &public)
            .verify(info, &sig_bits[1..])
            .unwrap_or_else(|_| panic!("{kt}: the request's signature"));
        // Two keys are two keys.
        assert_ne!(new_key(alg).unwrap().0, key_pem);
    }
}

#[test]
fn key_types_ring_cannot_make_are_refused_naming_pod_volume_field_and_value() {
    for kt in ["RSA3072", "RSA4096", "ECDSAP521"] {
        let e = key_algorithm(&need(kt)).unwrap_err();
        assert_eq!(
            e,
            format!(
                "pod ns/web: volume \"tls\": sources[1].podCertificate.keyType \"{kt}\": not \
                 supported by picolet, whose crypto library (ring) cannot generate RSA or ECDSA \
                 P-521 keys; ECDSAP256, ECDSAP384 and ED25519 are"
            )
        );
    }
    assert!(
        key_algorithm(&need("DSA"))
            .unwrap_err()
            .contains("unknown key type")
    );
    // The source is refused for good: no request, the volume says why.
    let mut m = Manager::default();
    let mut store = Contents::default();
    let needs = BTreeMap::from([("uid-1/tls/1".to_owned(), need("RSA4096"))]);
    let step = m.step(0, &needs, Some(&Requests::new()), &mut store);
    assert!(step.create.is_empty());
    assert_eq!(step.changed, BTreeSet::from(["uid-1".to_owned()]));
    let e = store.pod_certificate("uid-1/tls/1").unwrap_err();
    assert!(e.contains("keyType \"RSA4096\""), "{e}");
    assert!(!e.ends_with(" yet"), "a failure, not a wait");
}

#[test]
fn the_request_names_the_pod_its_service_account_and_the_node() {
    let mut n = need("ECDSAP256");
    n.source.max_expiration_seconds = Some(3600);
    n.source
        .user_annotations
        .insert("e2e.example.com/spiffe-path".into(), "/x".into());
    let b = request_body(&n, "sa-uid", "node-a", "node-uid", &[1, 2, 3]);
    assert_eq!(b["apiVersion"], "certificates.k8s.io/v1");
    assert_eq!(b["kind"], "PodCertificateRequest");
    assert_eq!(b["metadata"]["namespace"], "ns");
    assert_eq!(b["metadata"]["generateName"], "req-");
    assert_eq!(
        b["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-1"}])
    );
    assert_eq!(
        b["spec"],
        json!({
            "signerName": "e2e.example.com/s",
            "podName": "web", "podUID": "uid-1",
            "serviceAccountName": "sa", "serviceAccountUID": "sa-uid",
            "nodeName": "node-a", "nodeUID": "node-uid",
            "maxExpirationSeconds": 3600,
            "stubPKCS10Request": "AQID",
            "unverifiedUserAnnotations": {"e2e.example.com/spiffe-path": "/x"},
        })
    );
    // Unset: left to the apiserver's default (86400), as the kubelet leaves it.
    let b = request_body(&need("ED25519"), "s", "n", "u", &[]);
    assert!(b["spec"].get("maxExpirationSeconds").is_none());
    assert!(b["spec"].get("unverifiedUserAnnotations").is_none());
}

fn pcr(name: &str, status: Value) -> Value {
    json!({"metadata": {"namespace": "ns", "name": name}, "spec": {"podUID": "uid-1"}, "status": status})
}

#[test]
fn requests_are_read_as_their_first_final_condition_says() {
    let pending = pcr("req-1", json!({}));
    assert_eq!(
        decode_request(&pending).unwrap(),
        ("ns/req-1".to_owned(), Outcome::Pending)
    );
    let issued = pcr(
        "req-2",
        json!({
            "conditions": [{"type": "Issued", "status": "True", "reason": "Reason", "message": "Issued"}],
            "certificateChain": "junk\n-----BEGIN CERTIFICATE-----\nHdr: x\n\nAAEC\n-----END CERTIFICATE-----\n-----BEGIN OTHER-----\nAwQ=\n-----END OTHER-----\n",
            "notBefore": "2026-12-07T00:00:00Z",
            "beginRefreshAt": "2026-12-07T23:30:00Z",
            "notAfter": "2026-12-08T00:00:00Z",
        }),
    );
    let (_, o) = decode_request(&issued).unwrap();
    let Outcome::Issued {
        chain,
        begin_refresh_at,
        not_after,
    } = o
    else {
        panic!("{o:?}")
    };
    // Headers and text between blocks dropped, every block a CERTIFICATE.
    assert_eq!(
        String::from_utf8(chain.to_vec()).unwrap(),
        "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n\
         -----BEGIN CERTIFICATE-----\nAwQ=\n-----END CERTIFICATE-----\n"
    );
    assert_eq!(not_after - begin_refresh_at, 1800);
    let denied = pcr(
        "req-3",
        json!({"conditions": [{"type": "Denied", "status": "True", "reason": "UnsupportedKeyType", "message": "no"}]}),
    );
    assert_eq!(
        decode_request(&denied).unwrap().1,
        Outcome::Denied {
            reason: "UnsupportedKeyType".into(),
            message: "no".into()
        }
    );
    assert!(decode_request(&json!({"metadata": {}})).is_err());
}

const T0: i64 = 1_800_000_000;

fn issued(chain: &str, begin_refresh_at: i64, not_after: i64) -> Outcome {
    Outcome::Issued {
        chain: Arc::new(chain.as_bytes().to_vec()),
        begin_refresh_at,
        not_after,
    }
}

#[test]
fn a_source_waits_for_its_request_then_refreshes_at_begin_refresh_at() {
    let k = "uid-1/tls/1".to_owned();
    let needs = BTreeMap::from([(k.clone(), need("ECDSAP256"))]);
    let mut m = Manager::default();
    let mut store = Contents::default();
    // First: a request to make; none made yet, so the next step asks again.
    let s = m.step(T0, &needs, None, &mut store);
    assert_eq!(s.create, vec![k.clone()]);
    assert!(s.changed.is_empty());
    assert_eq!(m.step(T0, &needs, None, &mut store).create, vec![k.clone()]);
    m.created(&k, "ns/req-1".into(), T0, b"KEY1\n".to_vec());
    // Waiting: the pod's volume is not ready, and waits.
    let mut reqs = Requests::from([("ns/req-1".to_owned(), Outcome::Pending)]);
    for at in [T0 + 1, T0 + 500] {
        let s = m.step(at, &needs, Some(&reqs), &mut store);
        assert_eq!(s, Step::default());
    }
    assert_eq!(
        store.pod_certificate(&k).unwrap_err(),
        "credential bundle is not issued yet"
    );
    // Issued: key and chain for the volume, the pod synced.
    let (begin, after) = (T0 + 3600, T0 + 5400);
    reqs.insert("ns/req-1".into(), issued("CHAIN1\n", begin, after));
    let s = m.step(T0 + 600, &needs, Some(&reqs), &mut store);
    assert_eq!(s.changed, BTreeSet::from(["uid-1".to_owned()]));
    assert!(s.create.is_empty());
    let (key, chain) = store.pod_certificate(&k).unwrap();
    assert_eq!(
        (key.as_slice(), chain.as_slice()),
        (&b"KEY1\n"[..], &b"CHAIN1\n"[..])
    );
    // Nothing before beginRefreshAt; a new request by beginRefreshAt and the jitter.
    let mut first = None;
    for at in (T0 + 600..=begin + 300).step_by(10) {
        let s = m.step(at, &needs, Some(&reqs), &mut store);
        assert!(s.changed.is_empty() && s.events.is_empty());
        if !s.create.is_empty() {
            first = Some(at);
            break;
        }
    }
    let first = first.expect("a refresh request by beginRefreshAt + 5 min");
    assert!(
        first >= begin,
        "not before beginRefreshAt: {first} < {begin}"
    );
    m.created(&k, "ns/req-2".into(), first, b"KEY2\n".to_vec());
    reqs.insert("ns/req-2".into(), Outcome::Pending);
    // While the refresh waits, the volume keeps the current credential.
    let s = m.step(first + 1, &needs, Some(&reqs), &mut store);
    assert_eq!(s, Step::default());
    assert_eq!(store.pod_certificate(&k).unwrap().0.as_slice(), b"KEY1\n");
    reqs.insert(
        "ns/req-2".into(),
        issued("CHAIN2\n", begin + 3600, after + 3600),
    );
    let s = m.step(first + 2, &needs, Some(&reqs), &mut store);
    assert_eq!(s.changed, BTreeSet::from(["uid-1".to_owned()]));
    let (key, chain) = store.pod_certificate(&k).unwrap();
    assert_eq!(
        (key.as_slice(), chain.as_slice()),
        (&b"KEY2\n"[..], &b"CHAIN2\n"[..])
    );
    // The pod gone: its source and credential go.
    let s = m.step(first + 3, &BTreeMap::new(), Some(&reqs), &mut store);
    assert!(s.create.is_empty());
    assert!(store.pod_certificates.is_empty() && m.is_empty());
}

#[test]
fn a_late_refresh_and_an_expired_certificate_are_told_once() {
    let k = "uid-1/tls/1".to_owned();
    let needs = BTreeMap::from([(k.clone(), need("ED25519"))]);
    let mut m = Manager::default();
    let mut store = Contents::default();
    m.step(T0, &needs, None, &mut store);
    m.created(&k, "ns/req-1".into(), T0, b"K".to_vec());
    let reqs = Requests::from([("ns/req-1".to_owned(), issued("C", T0 + 100, T0 + 2000))]);
    m.step(T0 + 1, &needs, Some(&reqs), &mut store);
    // The refresh request cannot be made (the apiserver is away): nothing is created.
    let reasons = |s: &Step| s.events.iter().map(|e| e.1).collect::<Vec<_>>();
    let s = m.step(T0 + 100 + 601, &needs, Some(&reqs), &mut store);
    assert_eq!(reasons(&s), vec!["CertificateOverdueForRefresh"]);
    assert!(reasons(&m.step(T0 + 800, &needs, Some(&reqs), &mut store)).is_empty());
    let s = m.step(T0 + 2001, &needs, Some(&reqs), &mut store);
    assert_eq!(reasons(&s), vec!["CertificateExpired"]);
    assert!(reasons(&m.step(T0 + 3000, &needs, Some(&reqs), &mut store)).is_empty());
    // The expired credential is still what the volume holds until a new one comes.
    assert!(store.pod_certificate(&k).is_ok());
}

#[test]
fn a_denied_or_failed_request_is_final_and_told_once() {
    for (kind, verb) in [("Denied", "denied"), ("Failed", "failed")] {
        let k = "uid-1/tls/1".to_owned();
        let needs = BTreeMap::from([(k.clone(), need("ECDSAP384"))]);
        let mut m = Manager::default();
        let mut store = Contents::default();
        m.step(T0, &needs, None, &mut store);
        m.created(&k, "ns/req-1".into(), T0, b"K".to_vec());
        let o = if kind == "Denied" {
            Outcome::Denied {
                reason: "Nope".into(),
                message: "not this pod".into(),
            }
        } else {
            Outcome::Failed {
                reason: "Broken".into(),
                message: "signer down".into(),
            }
        };
        let reqs = Requests::from([("ns/req-1".to_owned(), o)]);
        let s = m.step(T0 + 1, &needs, Some(&reqs), &mut store);
        assert_eq!(s.events.len(), 1, "{s:?}");
        assert_eq!(s.events[0].1, kind);
        assert!(
            s.events[0].2.starts_with("PodCertificateRequest ns/req-1 "),
            "{s:?}"
        );
        assert_eq!(s.changed, BTreeSet::from(["uid-1".to_owned()]));
        let e = store.pod_certificate(&k).unwrap_err();
        let (r, msg) = if kind == "Denied" {
            ("Nope", "not this pod")
        } else {
            ("Broken", "signer down")
        };
        assert_eq!(
            e,
            format!(
                "PodCertificateRequest was permanently {verb}: reason=\"{r}\" message=\"{msg}\""
            )
        );
        // Final: no new request, no second event, whatever time passes.
        let s = m.step(T0 + 100_000, &needs, Some(&reqs), &mut store);
        assert_eq!(s, Step::default());
    }
}

#[test]
fn a_request_never_seen_is_made_again_after_ten_minutes() {
    let k = "uid-1/tls/1".to_owned();
    let needs = BTreeMap::from([(k.clone(), need("ECDSAP256"))]);
    let mut m = Manager::default();
    let mut store = Contents::default();
    m.step(T0, &needs, None, &mut store);
    m.created(&k, "ns/req-1".into(), T0, b"K".to_vec());
    let none = Requests::new();
    assert!(
        m.step(T0 + 599, &needs, Some(&none), &mut store)
            .create
            .is_empty()
    );
    let s = m.step(T0 + 600 + 300, &needs, Some(&none), &mut store);
    assert_eq!(s.create, vec![k.clone()]);
}
