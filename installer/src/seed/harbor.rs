//! Harbor project creation through its v2.0 API (`GET/POST /api/v2.0/projects`), over
//! [`PushClient::api`]: the registry's own origin, a total deadline and a size limit on every
//! answer; whatever Harbor says is escaped when shown.

use reqwest::{Method, StatusCode};

use super::client::PushClient;
use super::error::SeedError;

/// Creates every project in `projects` that Harbor does not have yet; returns those created.
///
/// # Errors
///
/// [`SeedError::Harbor`] naming the request and what Harbor answered; [`SeedError::Protocol`]
/// for an answer too slow or too large.
pub async fn ensure_projects(
    client: &PushClient,
    projects: &[String],
    public: bool,
) -> Result<Vec<String>, SeedError> {
    let err = |detail: String| SeedError::Harbor {
        registry: client.host().to_owned(),
        detail,
    };
    let mut created = Vec::new();
    for project in projects {
        let path = "/api/v2.0/projects";
        let (status, body) = client
            .api(Method::GET, path, &[("name", project.as_str())], None)
            .await?;
        if !status.is_success() {
            return Err(err(format!(
                "GET {path}?name={project} answered {status}: {}",
                harbor_message(&body)
            )));
        }
        let list: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| err(format!("project list is not JSON: {e}")))?;
        let exists = list.as_array().is_some_and(|a| {
            a.iter()
                .any(|p| p.get("name").and_then(|n| n.as_str()) == Some(project))
        });
        if exists {
            continue;
        }
        let payload = serde_json::json!({
            "project_name": project,
            "metadata": { "public": if public { "true" } else { "false" } },
        });
        let (status, body) = client
            .api(Method::POST, "/api/v2.0/projects", &[], Some(&payload))
            .await?;
        match status {
            StatusCode::CREATED => created.push(project.clone()),
            StatusCode::CONFLICT => {}
            s => {
                let hint = if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN {
                    "; the user needs the right to create projects (e.g. the Harbor admin)"
                } else {
                    ""
                };
                return Err(err(format!(
                    "creating project `{project}` answered {s}: {}{hint}",
                    harbor_message(&body)
                )));
            }
        }
    }
    Ok(created)
}

/// Harbor's `{"errors":[{"code":…,"message":…}]}` as `code: message`, else the raw body (its
/// start); shown through [`SeedError::Harbor`], which escapes it.
fn harbor_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let msgs: Vec<String> = parsed
        .as_ref()
        .and_then(|v| v.get("errors"))
        .and_then(|e| e.as_array())
        .map(|a| {
            a.iter()
                .take(10)
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.get("code").and_then(|c| c.as_str()).unwrap_or("?"),
                        e.get("message").and_then(|c| c.as_str()).unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if msgs.is_empty() {
        String::from_utf8_lossy(&body[..body.len().min(1200)])
            .chars()
            .take(300)
            .collect()
    } else {
        msgs.join("; ")
    }
}
