//! What the API server is asked: a TokenReview (who a token is, when the sidecar does not check
//! tokens itself) and a LocalSubjectAccessReview (whether a user may use the verb on the
//! InferenceService, as the namespace's Roles say).

use infergate_config::IdentityAuthorization;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, ResourceAttributes, SubjectAccessReviewSpec,
};
use kube::api::{Api, ObjectMeta, PostParams};

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// `system:serviceaccount:<namespace>:<name>` for a ServiceAccount.
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// A ServiceAccount's user, with the groups the API server gives every ServiceAccount
    /// (`system:serviceaccounts`, and the namespace's), as a RoleBinding may name them.
    pub fn of_service_account(subject: &str) -> User {
        let mut parts = subject.split(':');
        let groups = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("system"), Some("serviceaccount"), Some(namespace), Some(_)) => vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_string(),
            ],
            _ => vec!["system:authenticated".to_string()],
        };
        User {
            name: subject.to_string(),
            groups,
        }
    }
}

/// Who `token` is, for `audience`, as the API server says (none: not authenticated).
pub async fn token_review(
    client: &kube::Client,
    token: &str,
    audience: &str,
) -> Result<Option<User>, String> {
    let review = TokenReview {
        metadata: ObjectMeta::default(),
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: Some(vec![audience.to_string()]),
        },
        status: None,
    };
    let answer = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| format!("TokenReview: {e}"))?;
    let Some(status) = answer.status else {
        return Ok(None);
    };
    if status.authenticated != Some(true)
        || !status
            .audiences
            .unwrap_or_default()
            .iter()
            .any(|a| a == audience)
    {
        return Ok(None);
    }
    Ok(status.user.and_then(|user| {
        Some(User {
            name: user.username?,
            groups: user.groups.unwrap_or_default(),
        })
    }))
}

/// Whether `user` may use `verb` on the InferenceService `rule` names.
pub async fn may(
    client: &kube::Client,
    rule: &IdentityAuthorization,
    verb: &str,
    user: &User,
) -> Result<bool, String> {
    let review = LocalSubjectAccessReview {
        metadata: ObjectMeta {
            namespace: Some(rule.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(rule.namespace.clone()),
                group: Some(rule.group.clone()),
                resource: Some(rule.resource.clone()),
                name: Some(rule.name.clone()),
                verb: Some(verb.to_string()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        status: None,
    };
    let answer = Api::<LocalSubjectAccessReview>::namespaced(client.clone(), &rule.namespace)
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| format!("LocalSubjectAccessReview: {e}"))?;
    Ok(answer
        .status
        .is_some_and(|s| s.allowed && s.denied != Some(true)))
}

#[cfg(test)]
mod tests {
    use super::User;

    #[test]
    fn a_service_account_is_in_its_namespaces_group() {
        let user = User::of_service_account("system:serviceaccount:apps:checkout");
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:apps",
                "system:authenticated"
            ]
        );
        let other = User::of_service_account("someone");
        assert_eq!(other.groups, ["system:authenticated"]);
    }
}
