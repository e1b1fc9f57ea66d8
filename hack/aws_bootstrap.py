"""Creates the test's own admin identity in a fresh moto, then prints it as shell exports.

moto runs with INITIAL_NO_AUTH_ACTION_COUNT=6: exactly these three calls, and the same three
for an admin of a second account (OTHER_ACCOUNT, chosen by moto's `x-moto-account-id` header:
a stranger whose buckets the operator must never touch), pass unauthenticated, and every later
request must be signed by a key whose policies allow it.
Then, as that admin, registers the test cluster's ServiceAccount issuer as the account's IAM OIDC
provider (audience sts.amazonaws.com), as an EKS cluster's is, for ServiceAccountRole (IRSA).
The thumbprint is the issuer CA's SHA-1, as IAM asks for it (the emulator trusts that CA's file).
Last, the EKS cluster that stands for the test cluster (its OIDC issuer is the same, set by the
emulator), and the Pod Identity agent's own user, which may only call
eks-auth:AssumeRoleForPodIdentity on that cluster (hack/pod_identity_agent.py signs with it).
Usage: python aws_bootstrap.py ENDPOINT ISSUER CA_FILE
"""

import hashlib
import json
import ssl
import sys

import boto3

endpoint, issuer, ca_file = sys.argv[1], sys.argv[2], sys.argv[3]
OTHER_ACCOUNT = "210987654321"


def unauthenticated_admin(account=None):
    """An admin user (and its key) made by three unauthenticated calls, in `account` if named."""
    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
    )
    if account:
        iam.meta.events.register(
            "before-sign.iam.*",
            lambda request, **_: request.headers.__setitem__("x-moto-account-id", account))
    iam.create_user(UserName="s3op-test-admin")
    iam.put_user_policy(
        UserName="s3op-test-admin",
        PolicyName="admin",
        PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        ),
    )
    return iam.create_access_key(UserName="s3op-test-admin")["AccessKey"]


key = unauthenticated_admin()
print(f"export S3OP_AWS_ADMIN_ACCESS_KEY_ID={key['AccessKeyId']}")
print(f"export S3OP_AWS_ADMIN_SECRET_ACCESS_KEY={key['SecretAccessKey']}")
other = unauthenticated_admin(OTHER_ACCOUNT)
print(f"export S3OP_AWS_OTHER_ACCOUNT={OTHER_ACCOUNT}")
print(f"export S3OP_AWS_OTHER_ADMIN_ACCESS_KEY_ID={other['AccessKeyId']}")
print(f"export S3OP_AWS_OTHER_ADMIN_SECRET_ACCESS_KEY={other['SecretAccessKey']}")

admin = boto3.client(
    "iam",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id=key["AccessKeyId"],
    aws_secret_access_key=key["SecretAccessKey"],
)
with open(ca_file) as f:
    thumbprint = hashlib.sha1(ssl.PEM_cert_to_DER_cert(f.read())).hexdigest()
provider = admin.create_open_id_connect_provider(
    Url=issuer, ClientIDList=["sts.amazonaws.com"], ThumbprintList=[thumbprint]
)["OpenIDConnectProviderArn"]
print(f"export S3OP_OIDC_PROVIDER_ARN={provider}")

EKS_CLUSTER = "s3op-test"
boto = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"])
cluster_arn = boto3.client("eks", **boto).create_cluster(
    name=EKS_CLUSTER,
    roleArn=f"arn:aws:iam::{provider.split(':')[4]}:role/s3op-test-eks-cluster",
    resourcesVpcConfig={"subnetIds": []},
)["cluster"]["arn"]
print(f"export S3OP_EKS_CLUSTER_NAME={EKS_CLUSTER}")
admin.create_user(UserName="s3op-pod-identity-agent")
admin.put_user_policy(
    UserName="s3op-pod-identity-agent",
    PolicyName="assume-role-for-pod-identity",
    PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": "eks-auth:AssumeRoleForPodIdentity", "Resource": cluster_arn}]}),
)
agent = admin.create_access_key(UserName="s3op-pod-identity-agent")["AccessKey"]
print(f"export S3OP_POD_IDENTITY_AGENT_ACCESS_KEY_ID={agent['AccessKeyId']}")
print(f"export S3OP_POD_IDENTITY_AGENT_SECRET_ACCESS_KEY={agent['SecretAccessKey']}")
