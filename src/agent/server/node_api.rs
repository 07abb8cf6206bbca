//! The node API: its serving certificate (given, or self-signed under `<root-dir>/pki`, or
//! issued by the cluster), TLS, authentication and authorization, and the listener.

use std::rc::Rc;

use crate::agent::{Parts, cluster};
use crate::cli::options::Options;
use crate::server::settings::AuthorizationMode;
use crate::{certificate, rt, server};

pub(super) fn start(
    o: &Options,
    port: u16,
    parts: &Parts,
    ctx: Rc<server::Context>,
    join: Option<&cluster::Join>,
) -> Result<Vec<rt::Task<()>>, String> {
    let client = join.map(|j| &j.client);
    let s = &o.serving;
    let node = parts.rm.node();
    let mut tasks = Vec::new();
    let now = rt::now_nanos().div_euclid(1_000_000_000);
    let (cert, key) = certificate::serving_files(
        (
            s.tls_cert_file.as_deref(),
            s.tls_private_key_file.as_deref(),
        ),
        &o.root().pki(),
        &node.node_name,
        &node.node_ip,
        now,
    )
    .map_err(|e| e.to_string())?;
    let serving = server::node_api::serving_from_files(&cert, &key)
        .map_err(|e| format!("the node API's certificate: {e}"))?;
    let mut cert_name = cert.display().to_string();
    if s.server_tls_bootstrap {
        let Some(c) = client else {
            return Err(
                "serverTLSBootstrap needs --kubeconfig (the certificate is asked of \
                        the cluster)"
                    .into(),
            );
        };
        let certificate::ServingBootstrap {
            store,
            current,
            ask,
        } = certificate::ServingBootstrap::new(
            &o.root().pki(),
            &node.node_name,
            &node.node_ip,
            now,
        );
        if let Some(i) = &current {
            let what = store.current_path().display().to_string();
            serving.set(server::node_api::Serving::key_of(
                &i.cert_pem,
                &i.key_pem,
                &what,
            )?);
            cert_name = what;
        } else {
            cert_name = format!("{cert_name} until the cluster issues one");
        }
        let (target, path) = (serving.clone(), store.current_path());
        tasks.push(rt::spawn(certificate::run_serving(
            c.clone(),
            store,
            ask,
            current,
            move |i| {
                let what = path.display().to_string();
                target.set(server::node_api::Serving::key_of(
                    &i.cert_pem,
                    &i.key_pem,
                    &what,
                )?);
                Ok(())
            },
        )));
    }
    let tls = server::node_api::tls_config(serving, s.client_ca_file.as_deref(), s.tls13_only)
        .map_err(|e| format!("the node API's TLS: {e}"))?;
    let webhook = s.webhook_authn.unwrap_or(client.is_some());
    let authz = AuthorizationMode::or_default(s.authorization, client.is_some());
    let need =
        |what: &str| format!("{what} needs --kubeconfig (the apiserver answers the reviews)");
    if webhook && client.is_none() {
        return Err(need("--authentication-token-webhook"));
    }
    if authz == AuthorizationMode::Webhook && client.is_none() {
        return Err(need("--authorization-mode=Webhook"));
    }
    let auth = server::auth::Auth::new(
        s.anonymous,
        webhook.then(|| client.cloned()).flatten(),
        s.webhook_cache_ttl,
        (authz == AuthorizationMode::Webhook)
            .then(|| client.cloned())
            .flatten(),
        s.authorized_ttl,
        s.unauthorized_ttl,
        node.node_name.clone(),
    );
    let addr = std::net::SocketAddr::new(s.address, port);
    let l = server::node_api::bind(addr)?;
    log::info!(
        "node API on https://{addr} (certificate {}, client CA {}, token webhook {}, authorization {:?}, anonymous {})",
        cert_name,
        s.client_ca_file
            .as_ref()
            .map_or("none".into(), |p| p.display().to_string()),
        if webhook { "on" } else { "off" },
        authz,
        if s.anonymous { "on" } else { "off" },
    );
    let api = Rc::new(server::node_api::NodeApi {
        ctx,
        auth,
        configz: crate::cli::parse::configz(o, port).to_string().into(),
    });
    tasks.push(rt::spawn(server::node_api::serve(l, tls, api)));
    Ok(tasks)
}
