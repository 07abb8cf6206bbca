//! The pods the tests run: the image every runtime has (the scratch containerd imports it, a
//! test adds it to the fake runtime), a builder of one-container static pod manifests in YAML,
//! and JSON manifests for the tests that build a whole spec.

use serde_json::{Value, json};

/// busybox with sh, sleep, echo, cat, wget, nc, tar, httpd, ... (`scripts/scratch-containerd.sh`
/// imports it; tests of the fake runtime add it with `add_image`).
pub const IMAGE: &str = "picolet.local/busybox:1";

/// A static pod manifest in YAML, as people write them: one container `main` running
/// `sleep 3600` in [`IMAGE`], a grace period of 1 s, the runtime's pull policy and the
/// default restart policy, unless told otherwise. The container's `command` is the last line
/// but for [`Pod::container_yaml`], so YAML a test appends to [`Pod::yaml`] lands after it.
#[derive(Debug, Clone)]
pub struct Pod {
    name: String,
    image: String,
    command: Vec<String>,
    restart_policy: Option<String>,
    grace_seconds: u32,
    pull_always: bool,
    container_yaml: String,
}

impl Pod {
    pub fn new(name: &str) -> Pod {
        Pod {
            name: name.to_owned(),
            image: IMAGE.to_owned(),
            command: vec!["sleep".to_owned(), "3600".to_owned()],
            restart_policy: None,
            grace_seconds: 1,
            pull_always: false,
            container_yaml: String::new(),
        }
    }

    pub fn image(mut self, image: &str) -> Pod {
        self.image = image.to_owned();
        self
    }

    /// `command: [sh, -c, SCRIPT]`.
    pub fn sh(mut self, script: &str) -> Pod {
        self.command = vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
        self
    }

    pub fn restart_policy(mut self, policy: &str) -> Pod {
        self.restart_policy = Some(policy.to_owned());
        self
    }

    /// `terminationGracePeriodSeconds`.
    pub fn grace(mut self, seconds: u32) -> Pod {
        self.grace_seconds = seconds;
        self
    }

    /// `imagePullPolicy: Always`.
    pub fn pull_always(mut self) -> Pod {
        self.pull_always = true;
        self
    }

    /// More of the container, as YAML lines indented by four spaces (`    resources: ...\n`).
    pub fn container_yaml(mut self, lines: &str) -> Pod {
        self.container_yaml = lines.to_owned();
        self
    }

    pub fn yaml(&self) -> String {
        let mut s = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\nspec:\n",
            self.name
        );
        if let Some(p) = &self.restart_policy {
            s.push_str(&format!("  restartPolicy: {p}\n"));
        }
        s.push_str(&format!(
            "  terminationGracePeriodSeconds: {}\n  containers:\n  - name: main\n    image: {}\n",
            self.grace_seconds, self.image
        ));
        if self.pull_always {
            s.push_str("    imagePullPolicy: Always\n");
        }
        // A JSON array of strings is a YAML flow sequence.
        s.push_str(&format!("    command: {}\n", json!(self.command)));
        s.push_str(&self.container_yaml);
        s
    }
}

/// The pod `busy`, for the accounting tests: it fills 32 MiB of a memory-backed emptyDir, then
/// keeps a CPU busy.
pub fn busy() -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: busy\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  volumes:\n  - name: cache\n    emptyDir:\n      \
         medium: Memory\n  containers:\n  - name: main\n    image: {IMAGE}\n    \
         command: [\"sh\", \"-c\", \"dd if=/dev/zero of=/cache/fill bs=1048576 count=32 && \
         while :; do :; done\"]\n    volumeMounts:\n    - name: cache\n      mountPath: /cache\n"
    )
}

/// A container `name` running `sh -c SCRIPT` in [`IMAGE`], for [`manifest`].
pub fn container(name: &str, script: &str) -> Value {
    json!({"name": name, "image": IMAGE, "command": ["sh", "-c", script]})
}

/// A static pod manifest in JSON with this spec.
pub fn manifest(name: &str, spec: Value) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}).to_string()
}
