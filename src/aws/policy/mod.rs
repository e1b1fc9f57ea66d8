//! IAM policy documents: the least-privilege grants for applications, the IRSA trust policy, the
//! operator's own policy (shipped in `config/iam/` and used verbatim by the tests), and the trust
//! of the role it assumes in another account.

mod accounts;
mod bucket;
mod grant;
mod normalize;
mod operator;
mod replication;

pub use accounts::*;
pub use bucket::*;
pub use grant::*;
pub use normalize::*;
pub use operator::*;
pub use replication::*;

pub(crate) const VERSION: &str = "2012-10-17";

#[cfg(test)]
mod testing {
    use serde_json::Value;

    pub fn actions_of(statement: &Value) -> Vec<String> {
        statement["Action"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    }

    pub fn doc_actions(doc: &Value) -> Vec<String> {
        doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(actions_of)
            .collect()
    }
}
