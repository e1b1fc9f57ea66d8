//! A Bucket and a BucketAccess to it, both served: the setup most access, tenancy and security
//! tests start from before they change something.

use s3_operator::api::BucketAccess;

use super::*;

/// How long the Bucket may take to be Ready, and then the access to be Available.
const SERVED: Duration = Duration::from_secs(60);

/// A Ready Bucket and an Available BucketAccess to it in one namespace, with the APIs of that
/// namespace the tests go on with.
pub struct AccessPair {
    pub buckets: Api<Bucket>,
    pub accesses: Api<BucketAccess>,
    pub secrets: Api<Secret>,
    /// The S3 bucket's name, from the Bucket's status.
    pub s3_name: String,
    /// The access as read once it was Available (its UID and status).
    pub access: BucketAccess,
}

impl AccessPair {
    /// Creates `bucket` in `ns` and waits until it is Ready, then creates `access` (which should
    /// name it) and waits until it is Available. The access is created only once its Bucket is
    /// Ready, so it never reports a Bucket it waits for.
    pub async fn create(
        client: &kube::Client,
        ns: &str,
        bucket: Bucket,
        access: BucketAccess,
    ) -> AccessPair {
        let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
        let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns);
        let bucket_name = bucket.metadata.name.clone().expect("a named Bucket");
        let access_name = access.metadata.name.clone().expect("a named BucketAccess");
        let pp = PostParams::default();
        buckets.create(&pp, &bucket).await.expect("create Bucket");
        let s3_name = wait_ready(&buckets, &bucket_name).await;
        accesses
            .create(&pp, &access)
            .await
            .expect("create BucketAccess");
        wait_reason(&accesses, &access_name, "Available", SERVED).await;
        let access = accesses.get(&access_name).await.expect("get BucketAccess");
        AccessPair {
            buckets,
            accesses,
            secrets: Api::namespaced(client.clone(), ns),
            s3_name,
            access,
        }
    }

    /// The access's UID.
    pub fn uid(&self) -> String {
        self.access.metadata.uid.clone().expect("a UID")
    }

    /// The access's IAM user ARN (status.userArn; AccessKey credentials only).
    pub fn user_arn(&self) -> String {
        let status = self.access.status.as_ref().expect("status");
        status.user_arn.clone().expect("status.userArn")
    }

    /// The access's IAM user name: the last segment of its ARN.
    pub fn user(&self) -> String {
        iam_user_of(&self.access)
    }

    /// The data of the access's Secret as it is now.
    pub async fn secret_data(&self) -> BTreeMap<String, String> {
        let name = self.access.spec.credentials.secret_name.clone();
        let name = name.unwrap_or_else(|| self.access.metadata.name.clone().expect("a name"));
        secret_data(&self.secrets.get(&name).await.expect("the access's Secret"))
    }
}

/// The IAM user name of an `AccessKey` access: the last segment of its `status.userArn`.
pub fn iam_user_of(access: &BucketAccess) -> String {
    let status = access.status.as_ref().expect("status");
    let arn = status.user_arn.as_deref().expect("status.userArn");
    arn.rsplit('/').next().expect("a user name").to_string()
}
