use super::*;
use crate::credentials::AuthConfig;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("picolet-pullrec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn policy(p: VerificationPolicy, allow: &[&str]) -> Policy {
    Policy {
        policy: p,
        allowlist: allow.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn secret(ns: &str, name: &str, user: &str, pw: &str) -> PullSecret {
    PullSecret {
        uid: String::new(),
        namespace: ns.into(),
        name: name.into(),
        credential_hash: credential_hash(&AuthConfig {
            username: user.into(),
            password: pw.into(),
        }),
    }
}

#[test]
fn policy_values_parse_and_round_trip() {
    for v in VerificationPolicy::VALUES {
        assert_eq!(VerificationPolicy::parse(v).unwrap().as_str(), v);
    }
    assert_eq!(
        VerificationPolicy::default(),
        VerificationPolicy::NeverVerifyPreloadedImages
    );
    let e = VerificationPolicy::parse("Sometimes").unwrap_err();
    assert!(e.contains("must be one of: NeverVerify, "), "{e}");
}

#[test]
fn which_images_need_verification() {
    let img = "registry.local/app:1";
    let never = policy(VerificationPolicy::NeverVerify, &[]);
    assert!(!never.requires_verification(img, true));
    let preloaded = policy(VerificationPolicy::NeverVerifyPreloadedImages, &[]);
    assert!(preloaded.requires_verification(img, true));
    assert!(
        !preloaded.requires_verification(img, false),
        "an image the kubelet did not pull is exempt"
    );
    let always = policy(VerificationPolicy::AlwaysVerify, &[]);
    assert!(always.requires_verification(img, false));
    let allow = policy(
        VerificationPolicy::NeverVerifyAllowlistedImages,
        &["registry.local/fleet/*", "docker.io/library/busybox"],
    );
    assert!(!allow.requires_verification("registry.local/fleet/agent:2", true));
    assert!(!allow.requires_verification("busybox:1.36", true));
    assert!(!allow.requires_verification("docker.io/library/busybox@sha256:ab", true));
    assert!(allow.requires_verification("registry.local/app:1", false));
    assert!(allow.requires_verification("docker.io/library/busyboxes:1", false));
    assert!(allow.requires_verification("registry.local/fleetx/a:1", false));
}

#[test]
fn allowlist_patterns_as_upstream_checks_them() {
    for ok in [
        "registry.local/fleet/*",
        "docker.io/library/nginx",
        "reg:5000/a/b",
    ] {
        assert_eq!(check_allowlist_pattern(ok), Ok(()), "{ok}");
    }
    for (bad, says) in [
        (" docker.io/library/nginx", "spaces"),
        ("", "too short"),
        ("*", "only patterns ending with '/*'"),
        ("/*", "registry hostname"),
        ("registry.local/*/app", "only patterns ending with '/*'"),
        ("nginx", "written in full"),
        ("docker.io/library/nginx:1", "without tag"),
    ] {
        let e = check_allowlist_pattern(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn secrets_match_by_credential_hash() {
    let a = secret("ns", "a", "u", "pw");
    let other_name_same_creds = secret("other", "b", "u", "pw");
    let same_name_other_creds = secret("ns", "a", "u", "pw2");
    assert!(secrets_match(
        std::slice::from_ref(&a),
        &[other_name_same_creds]
    ));
    assert!(!secrets_match(
        std::slice::from_ref(&a),
        &[same_name_other_creds]
    ));
    assert!(!secrets_match(&[a], &[]));
    let mut empty = secret("ns", "a", "u", "pw");
    empty.credential_hash.clear();
    let mut pod = empty.clone();
    pod.credential_hash.clear();
    assert!(!secrets_match(&[empty], &[pod]), "no hash matches nothing");
}

#[test]
fn the_hash_is_not_the_credential() {
    let h = credential_hash(&AuthConfig {
        username: "user".into(),
        password: "hunter2".into(),
    });
    assert!(h.starts_with("sha256:") && h.len() == 71, "{h}");
    assert!(!h.contains("hunter2") && !h.contains("user"));
}

#[test]
fn records_decide_who_may_use_a_pulled_image() {
    let root = tmp("decide");
    let r = PullRecords::new(&root, Policy::default());
    let (image, id) = ("registry.local/app:1", "sha256:1111");
    // never pulled by picolet: preloaded, exempt under the default policy
    assert_eq!(r.verification(image, id), Verify::NotNeeded);
    // a pull under way (or cut short by a power cut) counts as pulled by the kubelet
    r.record_pull_intent(image).unwrap();
    let intent = root.join("image_manager/pulling").join(file_name(image));
    let text = std::fs::read_to_string(&intent).unwrap();
    assert!(text.contains("\"kind\":\"ImagePullIntent\""), "{text}");
    assert_eq!(r.verification(image, id), Verify::Pull);
    let fresh = PullRecords::new(&root, Policy::default());
    assert_eq!(
        fresh.verification(image, id),
        Verify::Pull,
        "the intent on disk survives a restart"
    );
    let s = secret("ns", "regcred", "u", "pw");
    r.record_image_pulled(
        image,
        id,
        PulledWith::Secret(s.clone()),
        1_700_000_000_000_000_000,
    );
    assert!(
        !intent.exists(),
        "the intent goes once the pull is recorded"
    );
    assert_eq!(
        r.verification(image, id),
        Verify::IfSecretMatches(vec![s.clone()])
    );
    // another tag of the same repository and image id: the same record
    assert_eq!(
        r.verification("registry.local/app@sha256:9", id),
        Verify::IfSecretMatches(vec![s.clone()])
    );
    // another repository with the same image id has no entry: pull
    assert_eq!(r.verification("registry.local/copy:1", id), Verify::Pull);
    // the record on disk names the secret and the hash, never the credential
    let path = root.join("image_manager/pulled").join(file_name(id));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"kind\":\"ImagePulledRecord\""), "{text}");
    assert!(text.contains("\"name\":\"regcred\"") && text.contains(&s.credential_hash));
    assert!(!text.contains("\"pw\"") && !text.contains(":pw"), "{text}");
    // a second secret is added beside the first
    let t = secret("ns2", "other", "v", "pw");
    r.record_image_pulled(image, id, PulledWith::Secret(t.clone()), 1);
    assert_eq!(
        r.verification(image, id),
        Verify::IfSecretMatches(vec![s, t])
    );
    // pulled anonymously or with the node's credentials: every pod may use it
    r.record_image_pulled(image, id, PulledWith::Node, 2);
    assert_eq!(r.verification(image, id), Verify::NotNeeded);
    // other policies
    let always = PullRecords::new(&root, policy(VerificationPolicy::AlwaysVerify, &[]));
    assert_eq!(
        always.verification("registry.local/other:1", "sha256:2"),
        Verify::Pull
    );
    let never = PullRecords::new(&root, policy(VerificationPolicy::NeverVerify, &[]));
    assert_eq!(
        never.verification("registry.local/other:1", "sha256:2"),
        Verify::NotNeeded
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_failed_pull_drops_the_intent_after_the_last_concurrent_one() {
    let root = tmp("failed");
    let r = PullRecords::new(&root, Policy::default());
    let image = "registry.local/app:1";
    r.record_pull_intent(image).unwrap();
    r.record_pull_intent(image).unwrap();
    let intent = root.join("image_manager/pulling").join(file_name(image));
    r.record_image_pull_failed(image);
    assert!(
        intent.exists(),
        "another pull of the image is still under way"
    );
    r.record_image_pull_failed(image);
    assert!(!intent.exists());
    assert_eq!(r.verification(image, "sha256:1"), Verify::NotNeeded);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_torn_or_garbage_record_is_refused_and_rebuilt() {
    let root = tmp("torn");
    let r = PullRecords::new(&root, Policy::default());
    let (image, id) = ("registry.local/app:1", "sha256:1111");
    let s = secret("ns", "regcred", "u", "pw");
    r.record_image_pulled(image, id, PulledWith::Secret(s.clone()), 1);
    let path = root.join("image_manager/pulled").join(file_name(id));
    let whole = std::fs::read(&path).unwrap();
    for bad in [
        whole[..whole.len() / 2].to_vec(),
        b"\0\0\0\0garbage".to_vec(),
        b"{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"lastUpdatedTime\":\"\",\"imageRef\":\"x\"}"
            .to_vec(),
        Vec::new(),
    ] {
        std::fs::write(&path, &bad).unwrap();
        // refused (not a crash, not trusted): the image was pulled by the kubelet, so a pod
        // must pull it again with its own credentials
        assert_eq!(r.verification(image, id), Verify::Pull);
        assert!(!path.exists(), "the unreadable record is removed");
        // the next pull writes it anew
        r.record_image_pulled(image, id, PulledWith::Secret(s.clone()), 2);
        assert_eq!(
            r.verification(image, id),
            Verify::IfSecretMatches(vec![s.clone()])
        );
    }
    // garbage beside a record being written over: the pull's merge starts afresh
    std::fs::write(&path, b"{").unwrap();
    r.record_image_pulled(image, id, PulledWith::Node, 3);
    assert_eq!(r.verification(image, id), Verify::NotNeeded);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn merging_keeps_one_entry_per_secret() {
    let mut rec = PulledRecord::default();
    let a = secret("ns", "a", "u", "pw");
    assert!(merge(&mut rec, "r/app", PulledWith::Secret(a.clone())));
    assert!(!merge(&mut rec, "r/app", PulledWith::Secret(a)), "no news");
    let rotated = secret("ns", "a", "u", "pw2");
    assert!(merge(
        &mut rec,
        "r/app",
        PulledWith::Secret(rotated.clone())
    ));
    assert_eq!(
        rec.credential_mapping["r/app"].kubernetes_secrets,
        vec![rotated.clone()]
    );
    assert!(merge(&mut rec, "r/app", PulledWith::Node));
    assert!(
        rec.credential_mapping["r/app"]
            .kubernetes_secrets
            .is_empty()
    );
    assert!(
        !merge(&mut rec, "r/app", PulledWith::Secret(rotated)),
        "node access stays"
    );
}

#[test]
fn records_of_images_gc_removed_are_pruned() {
    let root = tmp("prune");
    let r = PullRecords::new(&root, Policy::default());
    let s = secret("ns", "regcred", "u", "pw");
    let t0 = 1_700_000_000_000_000_000i64;
    let sec = 1_000_000_000i64;
    for (image, id) in [
        ("registry.local/kept:1", "sha256:aaaa"),
        ("registry.local/gone:1", "sha256:bbbb"),
        ("registry.local/late:1", "sha256:cccc"),
    ] {
        r.record_pull_intent(image).unwrap();
        let at = if id == "sha256:cccc" {
            t0 + 10 * sec
        } else {
            t0
        };
        r.record_image_pulled(image, id, PulledWith::Secret(s.clone()), at);
    }
    let pulled = root.join("image_manager/pulled");
    let garbage = pulled.join("sha256-0000");
    std::fs::write(&garbage, b"{not json").unwrap();
    let stray = pulled.join("notes.txt");
    std::fs::write(&stray, b"left alone").unwrap();
    // The collection listed the runtime's images at t0 + 5 s; only sha256:aaaa was left.
    let left: HashSet<String> = ["sha256:aaaa".to_owned()].into();
    assert_eq!(r.prune_unknown_records(&left, t0 + 5 * sec), 1);
    let path = |id: &str| pulled.join(file_name(id));
    assert!(path("sha256:aaaa").exists(), "the image is still there");
    assert!(
        !path("sha256:bbbb").exists(),
        "the removed image's record goes"
    );
    assert!(
        path("sha256:cccc").exists(),
        "written after the listing: its image may have been pulled since"
    );
    assert!(!garbage.exists(), "an unreadable record is refused");
    assert!(
        stray.exists(),
        "a file not named as a record is not touched"
    );
    // the gone image, pulled again later by a pod without the secret, is verified afresh
    assert_eq!(
        r.verification("registry.local/gone:1", "sha256:bbbb"),
        Verify::NotNeeded,
        "with no record and no intent, the default policy counts it as not pulled by the kubelet"
    );
    // every image gone: a record written in the second the listing began is kept
    assert_eq!(r.prune_unknown_records(&HashSet::new(), t0 + 10 * sec), 1);
    assert!(!path("sha256:aaaa").exists() && path("sha256:cccc").exists());
    assert_eq!(r.prune_unknown_records(&HashSet::new(), t0 + 11 * sec), 1);
    assert_eq!(
        std::fs::read_dir(&pulled).unwrap().count(),
        1,
        "only the stray file is left"
    );
    // without a root directory nothing is kept, nothing pruned
    let none = PullRecords::new(Path::new(""), Policy::default());
    assert_eq!(none.prune_unknown_records(&HashSet::new(), i64::MAX), 0);
    std::fs::remove_dir_all(&root).unwrap();
}
