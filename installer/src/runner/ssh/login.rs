//! Connecting and logging in: the SSH session within the connect timeout, then the key or the
//! password.

use std::sync::{Arc, Mutex};

use russh::client::{self, Handle};
use russh::keys::{Algorithm, PrivateKeyWithHashAlg};

use super::host_key::{Client, HostKeyCheck};
use super::known_hosts;
use super::options::SshOptions;
use crate::runner::RunError;

/// Connects, checks the host key and authenticates, within the connect timeout.
pub(super) async fn connect_once(opts: &Arc<SshOptions>) -> Result<Handle<Client>, RunError> {
    let node = opts.node.clone();
    match tokio::time::timeout(opts.connect_timeout, connect_and_login(opts)).await {
        Ok(result) => result,
        Err(_) => Err(RunError::Connection {
            node,
            message: format!(
                "no SSH session with {}:{} within {:?}",
                opts.host, opts.port, opts.connect_timeout
            ),
        }),
    }
}

async fn connect_and_login(opts: &Arc<SshOptions>) -> Result<Handle<Client>, RunError> {
    let check = Arc::new(HostKeyCheck {
        opts: opts.clone(),
        rejection: Mutex::new(None),
    });
    let recorded = known_hosts::recorded_algorithms(&opts.known_hosts, &opts.host, opts.port);
    let preferred = russh::Preferred {
        // AES-GCM first: hardware-accelerated on both ends, the fastest for big uploads.
        cipher: std::borrow::Cow::Owned(vec![
            russh::cipher::AES_256_GCM,
            russh::cipher::AES_128_GCM,
            russh::cipher::CHACHA20_POLY1305,
            russh::cipher::AES_256_CTR,
            russh::cipher::AES_128_CTR,
        ]),
        // Ask for the key type we know, as OpenSSH does; any other is then a changed key.
        key: if recorded.is_empty() {
            russh::Preferred::DEFAULT.key
        } else {
            std::borrow::Cow::Owned(recorded)
        },
        ..Default::default()
    };
    let config = client::Config {
        keepalive_interval: Some(opts.keepalive_interval),
        keepalive_max: 3,
        nodelay: true,
        inactivity_timeout: None,
        preferred,
        window_size: 8 * 1024 * 1024,
        ..Default::default()
    };
    let handler = Client {
        check: check.clone(),
    };
    let mut handle = client::connect(Arc::new(config), (opts.host.as_str(), opts.port), handler)
        .await
        .map_err(|e| match check.rejection() {
            Some(message) => RunError::HostKey {
                node: opts.node.clone(),
                message,
            },
            None => RunError::Connection {
                node: opts.node.clone(),
                message: format!("cannot connect to {}:{}: {e}", opts.host, opts.port),
            },
        })?;
    authenticate(&mut handle, opts).await?;
    tracing::debug!(node = %opts.node, host = %opts.host, port = opts.port, user = %opts.user, "SSH connected");
    Ok(handle)
}

async fn authenticate(handle: &mut Handle<Client>, opts: &SshOptions) -> Result<(), RunError> {
    let auth_error = |message: String| RunError::Auth {
        node: opts.node.clone(),
        user: opts.user.clone(),
        message,
    };
    let lost = |e: russh::Error| RunError::Connection {
        node: opts.node.clone(),
        message: format!("connection lost during authentication: {e}"),
    };
    let mut tried = Vec::new();
    if let Some(path) = &opts.private_key {
        let key = russh::keys::load_secret_key(path, None)
            .map_err(|e| auth_error(format!("cannot load private key {}: {e}", path.display())))?;
        let hash = if matches!(key.algorithm(), Algorithm::Rsa { .. }) {
            handle
                .best_supported_rsa_hash()
                .await
                .map_err(lost)?
                .flatten()
        } else {
            None
        };
        let kind = key.algorithm().as_str().to_string();
        let result = handle
            .authenticate_publickey(
                opts.user.clone(),
                PrivateKeyWithHashAlg::new(Arc::new(key), hash),
            )
            .await
            .map_err(lost)?;
        if result.success() {
            return Ok(());
        }
        tried.push(format!("public key {} ({kind})", path.display()));
    }
    if let Some(password) = &opts.password {
        let result = handle
            .authenticate_password(opts.user.clone(), password.expose())
            .await
            .map_err(lost)?;
        if result.success() {
            return Ok(());
        }
        tried.push("password".to_string());
    }
    Err(auth_error(if tried.is_empty() {
        "no private key or password configured".to_string()
    } else {
        format!("the server refused {}", tried.join(" and "))
    }))
}
