"""Tests of the emulator's workload identity extensions (hack/moto_server.py) and of the Pod
Identity agent stand-in (hack/pod_identity_agent.py), against a running test environment:
EKS Pod Identity associations, EKS Auth AssumeRoleForPodIdentity, session policies and session
tags, AssumeRoleWithWebIdentity (IRSA), the agent's container credentials endpoint, the
CloudTrail management events the emulator puts on EventBridge, bucket replication as S3
authorizes, checks and answers it, the account checks S3 and IAM make
(`x-amz-expected-bucket-owner`, `aws:ResourceAccount`) against a second account, and
member accounts (S3OP_EMULATOR_ACCOUNTS) with AssumeRole as STS checks it, against a launcher of
its own (the environment's moto is started without member accounts).

ServiceAccount tokens are real ones (kubectl create token); the expired one is signed with the
environment's own ServiceAccount key, the forged one with a fresh key.

Usage: S3OP_ENV_FILE=<env file of hack/env.sh up> <moto venv>/bin/python hack/emulator_test.py
"""

import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

import boto3
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def load_env(path):
    """The environment the env file exports (it is a shell script)."""
    out = subprocess.run(["bash", "-c", f"source '{path}' && env -0"], check=True,
                         capture_output=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


ENV = load_env(os.environ["S3OP_ENV_FILE"])
ENDPOINT = ENV["S3OP_AWS_ENDPOINT"]
CLUSTER = ENV["S3OP_EKS_CLUSTER_NAME"]
ACCOUNT = "123456789012"
CLUSTER_ARN = f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{CLUSTER}"
PODS = "pods.eks.amazonaws.com"
RUN = secrets.token_hex(3)  # names of this run, so a rerun against the same env starts clean
NS, OTHER_NS = f"emu-{RUN}", f"emu-other-{RUN}"


def client(service, key=None, secret=None, token=None):
    return boto3.client(
        service, endpoint_url=ENDPOINT, region_name="us-east-1",
        aws_access_key_id=key or ENV["S3OP_AWS_ADMIN_ACCESS_KEY_ID"],
        aws_secret_access_key=secret or ENV["S3OP_AWS_ADMIN_SECRET_ACCESS_KEY"],
        aws_session_token=token)


def session_client(service, creds):
    """A client signed with role session credentials in STS's or EKS Auth's shape."""
    get = lambda *names: next(creds[n] for n in names if n in creds)  # noqa: E731
    return client(service, get("AccessKeyId", "accessKeyId"),
                  get("SecretAccessKey", "secretAccessKey"), get("SessionToken", "sessionToken"))


IAM, S3, EKS = client("iam"), client("s3"), client("eks")
OTHER_ACCOUNT = ENV.get("S3OP_AWS_OTHER_ACCOUNT")
AGENT_AUTH = client("eks-auth", ENV["S3OP_POD_IDENTITY_AGENT_ACCESS_KEY_ID"],
                    ENV["S3OP_POD_IDENTITY_AGENT_SECRET_ACCESS_KEY"])


def kubectl(*args, stdin=None):
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True,
                          input=stdin, env=ENV).stdout.strip()


def service_account(namespace, name):
    kubectl("create", "serviceaccount", name, "-n", namespace)


def pod(namespace, name, account):
    """A Pod that never runs (its node does not exist), to bind tokens to. Returns its uid."""
    kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"serviceAccountName": account, "nodeName": "s3op-no-such-node",
                 "automountServiceAccountToken": False,
                 "containers": [{"name": "c", "image": "localhost/s3op/none:0"}]}}))
    return kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}")


def sa_token(namespace, account, audience, bound_pod=None):
    args = ["create", "token", account, "-n", namespace, "--audience", audience]
    if bound_pod:
        args += ["--bound-object-kind", "Pod", "--bound-object-name", bound_pod[0],
                 "--bound-object-uid", bound_pod[1]]
    return kubectl(*args)


def _b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def resign(token, key, **claims):
    """The token's header and claims (changed by `claims`), signed RS256 with `key`."""
    head, payload, _ = token.split(".")
    body = {**json.loads(_unb64(payload)), **claims}
    signing_input = f"{head}.{_b64(json.dumps(body).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def env_sa_key():
    with open(os.path.join(ENV["S3OP_ENV_DIR"], "pki", "sa.key"), "rb") as f:
        return serialization.load_pem_private_key(f.read(), password=None)


def fresh_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def role(name, trust, policy=None):
    arn = IAM.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    if policy:
        IAM.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
    return arn


def statement(action, resource, **extra):
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": action, "Resource": resource, **extra}]}


POD_TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": PODS}, "Action": ["sts:AssumeRole", "sts:TagSession"]}]}


BUCKETS = []


def bucket_with_objects(name):
    S3.create_bucket(Bucket=name)
    BUCKETS.append(name)
    for key in ("a/x", "b/x"):
        S3.put_object(Bucket=name, Key=key, Body=b"data")
    return name


def associate(namespace, account, role_arn, **extra):
    return EKS.create_pod_identity_association(
        clusterName=CLUSTER, namespace=namespace, serviceAccount=account, roleArn=role_arn,
        **extra)["association"]


def error_code(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def user_client(service, name, policy):
    """A client of a new IAM user whose only policy is `policy`."""
    IAM.create_user(UserName=name)
    IAM.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
    key = IAM.create_access_key(UserName=name)["AccessKey"]
    return client(service, key["AccessKeyId"], key["SecretAccessKey"])


def setUpModule():
    for namespace in (NS, OTHER_NS):
        kubectl("create", "namespace", namespace)
    for account in ("app", "crud", "dup", "polrules", "noassoc", "untrusted", "narrow", "tagged",
                    "notags", "irsa", "agent"):
        service_account(NS, account)
    service_account(OTHER_NS, "tagged")


def tearDownModule():
    """Leaves the environment's cluster, EKS cluster and S3 as they were for the Rust tests."""
    for namespace in (NS, OTHER_NS):
        kubectl("delete", "namespace", namespace, "--wait=false")
        listed = EKS.list_pod_identity_associations(clusterName=CLUSTER, namespace=namespace)
        for association in listed["associations"]:
            EKS.delete_pod_identity_association(clusterName=CLUSTER, associationId=association["associationId"])
    for bucket in BUCKETS:
        for listed in S3.list_objects_v2(Bucket=bucket).get("Contents", []):
            S3.delete_object(Bucket=bucket, Key=listed["Key"])
        S3.delete_bucket(Bucket=bucket)


class PodIdentityAssociations(unittest.TestCase):
    def test_create_describe_list_update_delete(self):
        arn = role(f"crud-{RUN}", POD_TRUST)
        created = associate(NS, "crud", arn, tags={"team": "a"})
        self.assertRegex(created["associationId"], r"^a-[a-z0-9]{17}$")
        self.assertEqual(created["associationArn"], f"arn:aws:eks:us-east-1:{ACCOUNT}:"
                         f"podidentityassociation/{CLUSTER}/{created['associationId']}")
        self.assertEqual((created["namespace"], created["serviceAccount"], created["roleArn"]),
                         (NS, "crud", arn))
        self.assertEqual(created["tags"], {"team": "a"})
        self.assertIn("createdAt", created)
        ids = dict(clusterName=CLUSTER, associationId=created["associationId"])
        self.assertEqual(EKS.describe_pod_identity_association(**ids)["association"]["roleArn"], arn)

        def listed(**filters):
            answer = EKS.list_pod_identity_associations(clusterName=CLUSTER, **filters)
            return [a["associationId"] for a in answer["associations"]]

        self.assertEqual(listed(namespace=NS, serviceAccount="crud"), [created["associationId"]])
        self.assertIn(created["associationId"], listed(namespace=NS))
        self.assertNotIn(created["associationId"], listed(namespace=OTHER_NS))
        self.assertEqual(listed(namespace=NS, serviceAccount="x"), [])

        policy = json.dumps(statement("s3:GetObject", "*"))
        self.assertEqual(error_code(EKS.update_pod_identity_association, **ids, policy=policy),
                         "InvalidParameterException")  # session tags still on
        updated = EKS.update_pod_identity_association(**ids, policy=policy, disableSessionTags=True)
        self.assertEqual((updated["association"]["policy"], updated["association"]["disableSessionTags"]),
                         (policy, True))
        self.assertGreaterEqual(updated["association"]["modifiedAt"], created["createdAt"])

        EKS.delete_pod_identity_association(**ids)
        self.assertEqual(error_code(EKS.describe_pod_identity_association, **ids),
                         "ResourceNotFoundException")

    def test_one_association_per_service_account(self):
        arn = role(f"dup-{RUN}", POD_TRUST)
        associate(NS, "dup", arn)
        self.assertEqual(error_code(associate, NS, "dup", arn), "ResourceInUseException")

    def test_unknown_cluster(self):
        self.assertEqual(error_code(EKS.create_pod_identity_association, clusterName="nope",
                                    namespace=NS, serviceAccount="app", roleArn="arn:aws:iam::1:role/x"),
                         "ResourceNotFoundException")
        self.assertEqual(error_code(EKS.list_pod_identity_associations, clusterName="nope"),
                         "ResourceNotFoundException")

    def test_policy_rules(self):
        arn = role(f"pol-{RUN}", POD_TRUST)
        policy = json.dumps(statement("s3:GetObject", "*"))
        self.assertEqual(error_code(associate, NS, "polrules", arn, policy=policy),
                         "InvalidParameterException")
        too_long = json.dumps(statement("s3:GetObject", ["arn:aws:s3:::b/" + "x" * 40] * 60))
        self.assertEqual(error_code(associate, NS, "polrules", arn, policy=too_long,
                                    disableSessionTags=True), "InvalidParameterException")

    def test_create_needs_eks_permission_and_pass_role(self):
        arn = role(f"pass-{RUN}", POD_TRUST)
        eks_only = statement("eks:*PodIdentityAssociation*", [CLUSTER_ARN, CLUSTER_ARN.replace(
            ":cluster/", ":podidentityassociation/") + "/*"])
        no_pass = user_client("eks", f"nopass-{RUN}", eks_only)
        call = dict(clusterName=CLUSTER, namespace=OTHER_NS, serviceAccount="x", roleArn=arn)
        self.assertEqual(error_code(no_pass.create_pod_identity_association, **call), "AccessDeniedException")
        eks_only["Statement"].append({"Effect": "Allow", "Action": "iam:PassRole", "Resource": arn})
        with_pass = user_client("eks", f"pass-{RUN}", eks_only)
        made = with_pass.create_pod_identity_association(**call)["association"]
        nothing = user_client("eks", f"noeks-{RUN}", statement("iam:PassRole", arn))
        self.assertEqual(error_code(nothing.describe_pod_identity_association, clusterName=CLUSTER,
                                    associationId=made["associationId"]), "AccessDeniedException")
        with_pass.delete_pod_identity_association(clusterName=CLUSTER, associationId=made["associationId"])


class AssumeRoleForPodIdentity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bucket = bucket_with_objects(f"pod-id-{RUN}")
        cls.role = role(f"app-{RUN}", POD_TRUST, statement("s3:*", [
            f"arn:aws:s3:::{cls.bucket}", f"arn:aws:s3:::{cls.bucket}/*"]))
        cls.association = associate(NS, "app", cls.role)
        cls.pod = ("app-pod", pod(NS, "app-pod", "app"))

    def assume(self, token):
        return AGENT_AUTH.assume_role_for_pod_identity(clusterName=CLUSTER, token=token)

    def test_a_pod_token_gets_the_associations_role(self):
        answer = self.assume(sa_token(NS, "app", PODS, self.pod))
        self.assertEqual(answer["subject"], {"namespace": NS, "serviceAccount": "app"})
        self.assertEqual(answer["audience"], PODS)
        self.assertEqual(answer["podIdentityAssociation"]["associationId"], self.association["associationId"])
        self.assertRegex(answer["assumedRoleUser"]["arn"],
                         rf"^arn:aws:sts::{ACCOUNT}:assumed-role/app-{RUN}/eks-{CLUSTER}-app-pod-")
        creds = answer["credentials"]
        me = session_client("sts", creds).get_caller_identity()["Arn"]
        self.assertEqual(me, answer["assumedRoleUser"]["arn"])
        got = session_client("s3", creds).get_object(Bucket=self.bucket, Key="b/x")["Body"].read()
        self.assertEqual(got, b"data")

    def test_refusals(self):
        real = sa_token(NS, "app", PODS, self.pod)
        cases = {
            "wrong audience": (sa_token(NS, "app", "sts.amazonaws.com"), "InvalidTokenException"),
            "forged signature": (resign(real, fresh_key()), "InvalidTokenException"),
            "expired": (resign(real, env_sa_key(), exp=int(time.time()) - 60), "ExpiredTokenException"),
            "no association": (sa_token(NS, "noassoc", PODS), "ResourceNotFoundException"),
        }
        for name, (token, code) in cases.items():
            with self.subTest(name):
                self.assertEqual(error_code(self.assume, token), code)

    def test_the_env_key_signs_a_token_that_is_accepted(self):
        # The expired-token case above is refused for its expiry, not for its signature.
        fresh = resign(sa_token(NS, "app", PODS), env_sa_key(), exp=int(time.time()) + 600)
        self.assertEqual(self.assume(fresh)["subject"]["serviceAccount"], "app")

    def test_role_that_does_not_trust_pod_identity(self):
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": PODS}, "Action": "sts:AssumeRole"}]}
        associate(NS, "untrusted", role(f"untrusted-{RUN}", trust))
        self.assertEqual(error_code(self.assume, sa_token(NS, "untrusted", PODS)), "AccessDeniedException")

    def test_caller_needs_eks_auth_permission(self):
        admin_less = user_client("eks-auth", f"noauth-{RUN}", statement("s3:*", "*"))
        self.assertEqual(error_code(admin_less.assume_role_for_pod_identity, clusterName=CLUSTER,
                                    token=sa_token(NS, "app", PODS)), "AccessDeniedException")


class SessionPolicies(unittest.TestCase):
    """The role allows s3:* on the bucket; the session policy only GetObject under a/."""

    @classmethod
    def setUpClass(cls):
        cls.bucket = bucket_with_objects(f"session-{RUN}")
        cls.narrow = json.dumps(statement("s3:GetObject", f"arn:aws:s3:::{cls.bucket}/a/*"))
        everything = statement("s3:*", [f"arn:aws:s3:::{cls.bucket}", f"arn:aws:s3:::{cls.bucket}/*"])
        cls.pod_role = role(f"shared-{RUN}", POD_TRUST, everything)
        # moto evaluates a trust policy statement naming a Service against a user as a Deny:
        # STS's callers get a role of their own.
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/s3op-test-admin"},
            "Action": "sts:AssumeRole"}]}
        cls.role_name = f"sts-{RUN}"
        cls.role = role(cls.role_name, trust, everything)

    def assert_narrowed(self, s3):
        self.assertEqual(s3.get_object(Bucket=self.bucket, Key="a/x")["Body"].read(), b"data")
        self.assertEqual(error_code(s3.get_object, Bucket=self.bucket, Key="b/x"), "AccessDenied")
        self.assertEqual(error_code(s3.put_object, Bucket=self.bucket, Key="a/y", Body=b"x"), "AccessDenied")

    def test_association_policy_narrows_the_role(self):
        associate(NS, "narrow", self.pod_role, policy=self.narrow, disableSessionTags=True)
        creds = AGENT_AUTH.assume_role_for_pod_identity(
            clusterName=CLUSTER, token=sa_token(NS, "narrow", PODS))["credentials"]
        self.assert_narrowed(session_client("s3", creds))

    def test_assume_role_policy_narrows_the_role_and_the_bucket_policy_naming_the_role(self):
        session = f"s-{RUN}"
        creds = client("sts").assume_role(RoleArn=self.role, RoleSessionName=session,
                                          Policy=self.narrow)["Credentials"]
        s3 = session_client("s3", creds)
        self.assert_narrowed(s3)
        session_arn = f"arn:aws:sts::{ACCOUNT}:assumed-role/{self.role_name}/{session}"
        for principal, allowed in ((self.role, False), (session_arn, True)):
            with self.subTest(principal=principal):
                S3.put_bucket_policy(Bucket=self.bucket, Policy=json.dumps({
                    "Version": "2012-10-17", "Statement": [{
                        "Effect": "Allow", "Principal": {"AWS": principal}, "Action": "s3:GetObject",
                        "Resource": f"arn:aws:s3:::{self.bucket}/b/*"}]}))
                code = error_code(s3.get_object, Bucket=self.bucket, Key="b/x")
                self.assertEqual(code, None if allowed else "AccessDenied")
        S3.delete_bucket_policy(Bucket=self.bucket)

    def test_unrestricted_session_keeps_the_roles_permissions(self):
        creds = client("sts").assume_role(RoleArn=self.role, RoleSessionName="full")["Credentials"]
        session_client("s3", creds).put_object(Bucket=self.bucket, Key="b/y", Body=b"x")


class SessionTags(unittest.TestCase):
    def test_principal_tags_of_a_pod_identity_session(self):
        bucket = bucket_with_objects(f"tags-{RUN}")
        condition = {"StringEquals": {"aws:PrincipalTag/kubernetes-namespace": NS,
                                      "aws:PrincipalTag/kubernetes-pod-name": "tagged-pod",
                                      "aws:PrincipalTag/eks-cluster-name": CLUSTER}}
        arn = role(f"tagged-{RUN}", POD_TRUST, statement(
            "s3:GetObject", f"arn:aws:s3:::{bucket}/*", Condition=condition))
        associate(NS, "tagged", arn)
        associate(OTHER_NS, "tagged", arn)
        other = associate(NS, "notags", arn, disableSessionTags=True)
        self.assertTrue(other["disableSessionTags"])

        def s3_for(namespace, account, bound=None):
            answer = AGENT_AUTH.assume_role_for_pod_identity(
                clusterName=CLUSTER, token=sa_token(namespace, account, PODS, bound))
            return session_client("s3", answer["credentials"])

        tagged_pod = ("tagged-pod", pod(NS, "tagged-pod", "tagged"))
        self.assertEqual(s3_for(NS, "tagged", tagged_pod).get_object(Bucket=bucket, Key="a/x")["Body"].read(),
                         b"data")
        other_pod = ("tagged-pod", pod(OTHER_NS, "tagged-pod", "tagged"))
        for name, s3 in (("another namespace", s3_for(OTHER_NS, "tagged", other_pod)),
                         ("no pod claim", s3_for(NS, "tagged")),
                         ("session tags disabled", s3_for(NS, "notags"))):
            with self.subTest(name):
                self.assertEqual(error_code(s3.get_object, Bucket=bucket, Key="a/x"), "AccessDenied")


class PodIdentityTrustByClusterArn(unittest.TestCase):
    """EKS sets `eks-cluster-arn` on the session: a trust naming the cluster by ARN admits this
    cluster, and refuses a cluster of the same name in another account."""

    def test_the_cluster_arn_session_tag_decides(self):
        for name, arn, allowed in (
                ("this", CLUSTER_ARN, True),
                ("same name, other account", CLUSTER_ARN.replace(ACCOUNT, "210987654321"), False)):
            with self.subTest(name):
                trust = {"Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow", "Principal": {"Service": PODS},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                    "Condition": {"StringEquals": {"aws:RequestTag/eks-cluster-arn": arn}}}]}
                account = "arn-ok" if allowed else "arn-other"
                service_account(NS, account)
                associate(NS, account, role(f"{account}-{RUN}", trust))
                code = error_code(AGENT_AUTH.assume_role_for_pod_identity, clusterName=CLUSTER,
                                  token=sa_token(NS, account, PODS))
                self.assertEqual(code, None if allowed else "AccessDeniedException")


@unittest.skipUnless(OTHER_ACCOUNT, "an environment without a second account")
class AccountChecks(unittest.TestCase):
    """A bucket of another account: S3 refuses every request that expects another owner
    (`x-amz-expected-bucket-owner`), and `aws:ResourceAccount` is the bucket owner's account."""

    @classmethod
    def setUpClass(cls):
        other = client("s3", ENV["S3OP_AWS_OTHER_ADMIN_ACCESS_KEY_ID"],
                       ENV["S3OP_AWS_OTHER_ADMIN_SECRET_ACCESS_KEY"])
        cls.ours, cls.theirs = f"acct-ours-{RUN}", f"acct-theirs-{RUN}"
        S3.create_bucket(Bucket=cls.ours)
        BUCKETS.append(cls.ours)
        other.create_bucket(Bucket=cls.theirs)
        cls.other = other
        for s3, bucket in ((S3, cls.ours), (other, cls.theirs)):
            s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})

    @classmethod
    def tearDownClass(cls):
        cls.other.delete_bucket(Bucket=cls.theirs)

    def test_expected_bucket_owner(self):
        tags = lambda b, owner: S3.get_bucket_tagging(Bucket=b, ExpectedBucketOwner=owner)  # noqa: E731
        self.assertEqual(tags(self.ours, ACCOUNT)["TagSet"], [{"Key": "k", "Value": "v"}])
        self.assertEqual(error_code(tags, self.ours, OTHER_ACCOUNT), "AccessDenied")
        self.assertEqual(error_code(tags, self.theirs, ACCOUNT), "AccessDenied")
        # The bucket's own account, and a request without the header, go on.
        self.assertEqual(
            self.other.get_bucket_tagging(Bucket=self.theirs, ExpectedBucketOwner=OTHER_ACCOUNT)["TagSet"],
            [{"Key": "k", "Value": "v"}])
        self.assertEqual(error_code(S3.get_bucket_tagging, Bucket=self.ours), None)
        # Writes and HEAD too (HEAD's refusal has no body: botocore names it by its status).
        put = dict(Bucket=self.theirs, ExpectedBucketOwner=ACCOUNT,
                   Tagging={"TagSet": [{"Key": "k", "Value": "mine"}]})
        self.assertEqual(error_code(S3.put_bucket_tagging, **put), "AccessDenied")
        self.assertEqual(error_code(S3.head_bucket, Bucket=self.theirs, ExpectedBucketOwner=ACCOUNT), "403")
        # A bucket that does not exist is still NoSuchBucket.
        self.assertEqual(error_code(tags, f"acct-none-{RUN}", ACCOUNT), "NoSuchBucket")

    def test_resource_account_is_the_bucket_owners(self):
        def reader(name, condition=None):
            st = {"Effect": "Allow", "Action": "s3:GetBucketTagging", "Resource": "arn:aws:s3:::acct-*"}
            if condition:
                st["Condition"] = condition
            return user_client("s3", f"{name}-{RUN}", {"Version": "2012-10-17", "Statement": [st]})

        ours_only = reader("acct-ours", {"StringEquals": {"aws:ResourceAccount": ACCOUNT}})
        self.assertEqual(error_code(ours_only.get_bucket_tagging, Bucket=self.ours), None)
        self.assertEqual(error_code(ours_only.get_bucket_tagging, Bucket=self.theirs), "AccessDenied")
        theirs_only = reader("acct-theirs", {"StringEquals": {"aws:ResourceAccount": OTHER_ACCOUNT}})
        self.assertEqual(error_code(theirs_only.get_bucket_tagging, Bucket=self.ours), "AccessDenied")

    def test_resource_account_of_iam_and_of_no_resource(self):
        in_account = {"StringEquals": {"aws:ResourceAccount": ACCOUNT}}
        policy = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "iam:GetUser",
             "Resource": f"arn:aws:iam::{ACCOUNT}:user/*", "Condition": in_account},
            {"Effect": "Allow", "Action": "s3:ListAllMyBuckets", "Resource": "*",
             "Condition": in_account}]}
        name = f"acct-iam-{RUN}"
        IAM.create_user(UserName=name)
        IAM.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
        key = IAM.create_access_key(UserName=name)["AccessKey"]
        iam = client("iam", key["AccessKeyId"], key["SecretAccessKey"])
        self.assertEqual(iam.get_user(UserName=name)["User"]["UserName"], name)
        s3 = client("s3", key["AccessKeyId"], key["SecretAccessKey"])
        self.assertIn(self.ours, [b["Name"] for b in s3.list_buckets()["Buckets"]])


class WebIdentity(unittest.TestCase):
    """AssumeRoleWithWebIdentity (IRSA) as STS checks it."""

    @classmethod
    def setUpClass(cls):
        provider = ENV["S3OP_OIDC_PROVIDER_ARN"]
        host = provider.split(":oidc-provider/", 1)[1]
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Federated": provider},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {f"{host}:sub": f"system:serviceaccount:{NS}:irsa",
                                           f"{host}:aud": "sts.amazonaws.com"}}}]}
        cls.role = role(f"irsa-{RUN}", trust, statement("s3:ListAllMyBuckets", "*"))
        cls.sts = boto3.client("sts", endpoint_url=ENDPOINT, region_name="us-east-1",
                               aws_access_key_id="unused", aws_secret_access_key="unused")

    def assume(self, token):
        return self.sts.assume_role_with_web_identity(
            RoleArn=self.role, RoleSessionName="irsa", WebIdentityToken=token)

    def test_the_service_account_assumes_its_role(self):
        creds = self.assume(sa_token(NS, "irsa", "sts.amazonaws.com"))["Credentials"]
        self.assertIn(f"assumed-role/irsa-{RUN}/irsa", session_client("sts", creds).get_caller_identity()["Arn"])

    def test_refusals(self):
        real = sa_token(NS, "irsa", "sts.amazonaws.com")
        cases = {
            "another service account": (sa_token(NS, "app", "sts.amazonaws.com"), "AccessDenied"),
            "another namespace": (sa_token(OTHER_NS, "tagged", "sts.amazonaws.com"), "AccessDenied"),
            "wrong audience": (sa_token(NS, "irsa", PODS), "InvalidIdentityToken"),
            "expired": (resign(real, env_sa_key(), exp=int(time.time()) - 60), "ExpiredTokenException"),
            "forged signature": (resign(real, fresh_key()), "InvalidIdentityToken"),
        }
        for name, (token, code) in cases.items():
            with self.subTest(name):
                self.assertEqual(error_code(self.assume, token), code)


class AgentStandIn(unittest.TestCase):
    """hack/pod_identity_agent.py's container credentials endpoint, as the SDKs call it."""

    @classmethod
    def setUpClass(cls):
        cls.bucket = bucket_with_objects(f"agent-{RUN}")
        associate(NS, "agent", role(f"agent-{RUN}", POD_TRUST,
                                    statement("s3:GetObject", f"arn:aws:s3:::{cls.bucket}/*")))

    def get(self, token=None, url=ENV["S3OP_POD_IDENTITY_AGENT_URL"]):
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", token)
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def test_credentials_for_a_pod_token(self):
        bucket = self.bucket
        status, creds = self.get(sa_token(NS, "agent", PODS))
        self.assertEqual(status, 200)
        self.assertEqual(set(creds), {"AccessKeyId", "SecretAccessKey", "Token", "AccountId", "Expiration"})
        self.assertEqual(creds["AccountId"], ACCOUNT)
        self.assertRegex(creds["Expiration"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        s3 = session_client("s3", {**creds, "SessionToken": creds["Token"]})
        self.assertEqual(s3.get_object(Bucket=bucket, Key="a/x")["Body"].read(), b"data")
        self.assertEqual(error_code(s3.put_object, Bucket=bucket, Key="a/y", Body=b""), "AccessDenied")

    @unittest.skipUnless(ENV.get("S3OP_NODE_POD_IDENTITY_AGENT_URL"), "no node")
    def test_the_nodes_agent_address(self):
        url = ENV["S3OP_NODE_POD_IDENTITY_AGENT_URL"]
        self.assertEqual(url, "http://169.254.170.23/v1/credentials")
        status, creds = self.get(sa_token(NS, "agent", PODS), url)
        self.assertEqual((status, creds["AccountId"]), (200, ACCOUNT))

    def test_refusals(self):
        self.assertEqual(self.get()[0], 400)
        status, body = self.get(sa_token(NS, "agent", "sts.amazonaws.com"))
        self.assertEqual((status, body["code"]), (400, "InvalidTokenException"))


class CloudTrailEvents(unittest.TestCase):
    """S3 bucket-level writes and IAM writes reach EventBridge's default bus as CloudTrail "AWS
    API Call" events, which a rule sends to SQS; reads and object writes (data events) do not.
    A refused write is recorded with its errorCode, as CloudTrail does, and a rule with
    `errorCode: [{exists: false}]` (the operator's drift rule) leaves it out."""

    @classmethod
    def setUpClass(cls):
        cls.sqs, events = client("sqs"), client("events")
        cls.bucket = cls.user = f"ct-{RUN}"
        match = [{"requestParameters": {"bucketName": [cls.bucket]}},
                 {"requestParameters": {"userName": [cls.user]}}]
        succeeded = [dict(m, errorCode=[{"exists": False}]) for m in match]
        cls.urls = {}
        for name, branches in (("all", match), ("succeeded", succeeded)):
            url = cls.sqs.create_queue(QueueName=f"ct-{name}-{RUN}")["QueueUrl"]
            arn = cls.sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            pattern = {"source": ["aws.s3", "aws.iam"],
                       "detail-type": ["AWS API Call via CloudTrail"],
                       "detail": {"$or": branches}}
            events.put_rule(Name=f"ct-{name}-{RUN}", EventPattern=json.dumps(pattern))
            events.put_targets(Rule=f"ct-{name}-{RUN}", Targets=[{"Id": "queue", "Arn": arn}])
            cls.urls[name] = url

    def received(self, queue):
        out = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.urls[queue], MaxNumberOfMessages=10,
                                           WaitTimeSeconds=1).get("Messages", [])
            if not got:
                return out
            out += [json.loads(m["Body"]) for m in got]

    def test_writes_become_events_and_nothing_else_does(self):
        S3.create_bucket(Bucket=self.bucket)
        S3.put_public_access_block(Bucket=self.bucket, PublicAccessBlockConfiguration={
            "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True})
        S3.get_public_access_block(Bucket=self.bucket)
        S3.put_object(Bucket=self.bucket, Key="k", Body=b"x")
        self.assertEqual(error_code(S3.delete_bucket, Bucket=self.bucket), "BucketNotEmpty")
        IAM.create_user(UserName=self.user)
        IAM.get_user(UserName=self.user)
        events = self.received("all")
        self.assertEqual(sorted((e["source"], e["detail"]["eventName"]) for e in events), [
            ("aws.iam", "CreateUser"), ("aws.s3", "CreateBucket"), ("aws.s3", "DeleteBucket"),
            ("aws.s3", "PutBucketPublicAccessBlock")])
        self.assertEqual({e["detail-type"] for e in events}, {"AWS API Call via CloudTrail"})
        user = next(e["detail"] for e in events if e["detail"]["eventName"] == "CreateUser")
        self.assertEqual((user["eventSource"], user["awsRegion"], user["requestParameters"]),
                         ("iam.amazonaws.com", "us-east-1", {"userName": self.user}))
        self.assertEqual(user["userIdentity"]["type"], "IAMUser")
        self.assertTrue(user["userIdentity"]["arn"].endswith(":user/s3op-test-admin"))
        self.assertNotIn("errorCode", user)
        pab = next(e["detail"] for e in events
                   if e["detail"]["eventName"] == "PutBucketPublicAccessBlock")
        self.assertEqual((pab["eventSource"], pab["requestParameters"], pab["managementEvent"]),
                         ("s3.amazonaws.com", {"bucketName": self.bucket}, True))
        refused = next(e["detail"] for e in events if e["detail"]["eventName"] == "DeleteBucket")
        self.assertEqual(refused["errorCode"], "BucketNotEmpty")
        # The operator's rule's filter: refused calls changed nothing and wake nothing.
        succeeded = self.received("succeeded")
        self.assertEqual(sorted(e["detail"]["eventName"] for e in succeeded),
                         ["CreateBucket", "CreateUser", "PutBucketPublicAccessBlock"])


REPLICATION_TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "s3.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def bucket_versioned(s3, name, status="Enabled"):
    """A new bucket whose versioning is `status` (None: never set)."""
    s3.create_bucket(Bucket=name)
    if status:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": status})
    return name


class Replication(unittest.TestCase):
    """Bucket replication as S3 has it: Get/Put/DeleteBucketReplication authorized as
    s3:Get/PutReplicationConfiguration, PutBucketReplication also as iam:PassRole on its role and
    checked as S3 checks it (destinations, rule IDs, the V2 schema, SSE-KMS), GetBucketReplication
    answering what was stored in S3's XML, and Put/Delete recorded as CloudTrail events."""

    @classmethod
    def setUpClass(cls):
        cls.source, cls.dest = f"repl-src-{RUN}", f"repl-dst-{RUN}"
        cls.unversioned, cls.suspended = f"repl-unv-{RUN}", f"repl-sus-{RUN}"
        cls.plain, cls.trail = f"repl-plain-{RUN}", f"repl-ct-{RUN}"
        for name, status in ((cls.source, "Enabled"), (cls.dest, "Enabled"), (cls.trail, "Enabled"),
                             (cls.unversioned, None), (cls.suspended, "Suspended"), (cls.plain, None)):
            bucket_versioned(S3, name, status)
            BUCKETS.append(name)
        cls.other = client("s3", ENV["S3OP_AWS_OTHER_ADMIN_ACCESS_KEY_ID"],
                           ENV["S3OP_AWS_OTHER_ADMIN_SECRET_ACCESS_KEY"])
        cls.theirs = bucket_versioned(cls.other, f"repl-theirs-{RUN}")
        cls.role = role(f"repl-{RUN}", REPLICATION_TRUST)
        cls.kms_key = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
        cls.sqs, events = client("sqs"), client("events")
        cls.queue = cls.sqs.create_queue(QueueName=f"repl-ct-{RUN}")["QueueUrl"]
        arn = cls.sqs.get_queue_attributes(
            QueueUrl=cls.queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        pattern = {"source": ["aws.s3"], "detail-type": ["AWS API Call via CloudTrail"],
                   "detail": {"requestParameters": {"bucketName": [cls.trail]}}}
        events.put_rule(Name=f"repl-ct-{RUN}", EventPattern=json.dumps(pattern))
        events.put_targets(Rule=f"repl-ct-{RUN}", Targets=[{"Id": "queue", "Arn": arn}])

    @classmethod
    def tearDownClass(cls):
        cls.other.delete_bucket(Bucket=cls.theirs)

    def rule(self, rule_id, priority, destination=None, **extra):
        """A V2 rule (a Filter) replicating everything to `destination` (a bucket name)."""
        return {"ID": rule_id, "Priority": priority, "Status": "Enabled", "Filter": {"Prefix": ""},
                "Destination": {"Bucket": f"arn:aws:s3:::{destination or self.dest}"},
                "DeleteMarkerReplication": {"Status": "Disabled"}, **extra}

    def put(self, rules, s3=S3, bucket=None, role_arn=None):
        return s3.put_bucket_replication(Bucket=bucket or self.source, ReplicationConfiguration={
            "Role": role_arn or self.role, "Rules": rules})

    def stored(self, bucket=None):
        """What GetBucketReplication answers the admin (None: ReplicationConfigurationNotFoundError)."""
        try:
            return S3.get_bucket_replication(Bucket=bucket or self.source)["ReplicationConfiguration"]
        except ClientError as e:
            self.assertEqual((e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]),
                             (404, "ReplicationConfigurationNotFoundError"))
            return None

    def raw_answer(self, bucket=None):
        """GetBucketReplication's XML, parsed (ElementTree)."""
        bodies, s3 = [], client("s3")
        s3.meta.events.register("after-call.s3.GetBucketReplication",
                                lambda http_response, **_: bodies.append(http_response.content))
        s3.get_bucket_replication(Bucket=bucket or self.source)
        return ET.fromstring(bodies[0])

    def replicator(self, name, *statements):
        return user_client("s3", f"repl-{name}-{RUN}", {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", **st} for st in statements]})

    def test_requests_are_authorized_as_s3s_replication_actions(self):
        source = f"arn:aws:s3:::{self.source}"
        rules = [self.rule("all", 1)]
        # Stock moto checked these as ListBucket, CreateBucket and DeleteBucket.
        narrow = self.replicator("narrow", {"Action": ["s3:CreateBucket", "s3:ListBucket",
                                                       "s3:DeleteBucket", "iam:PassRole"],
                                            "Resource": "*"})
        for call in (lambda: self.put(rules, narrow),
                     lambda: narrow.get_bucket_replication(Bucket=self.source),
                     lambda: narrow.delete_bucket_replication(Bucket=self.source)):
            self.assertEqual(denied(call), (403, "AccessDenied", "Access Denied"))
        self.assertIsNone(self.stored())
        reader = self.replicator("reader", {"Action": "s3:GetReplicationConfiguration", "Resource": source})
        self.assertEqual(error_code(self.put, rules, reader), "AccessDenied")
        self.assertEqual(error_code(reader.get_bucket_replication, Bucket=self.source),
                         "ReplicationConfigurationNotFoundError")
        writer = self.replicator(
            "writer", {"Action": "s3:PutReplicationConfiguration", "Resource": source},
            {"Action": "iam:PassRole", "Resource": self.role,
             "Condition": {"StringEquals": {"iam:PassedToService": "s3.amazonaws.com"}}})
        self.put(rules, writer)
        self.assertEqual(error_code(writer.get_bucket_replication, Bucket=self.source), "AccessDenied")
        self.assertEqual([r["ID"] for r in reader.get_bucket_replication(
            Bucket=self.source)["ReplicationConfiguration"]["Rules"]], ["all"])
        # DeleteBucketReplication is s3:PutReplicationConfiguration too.
        self.assertEqual(error_code(reader.delete_bucket_replication, Bucket=self.source), "AccessDenied")
        writer.delete_bucket_replication(Bucket=self.source)
        self.assertIsNone(self.stored())

    def test_put_needs_pass_role_on_its_role(self):
        may_put = {"Action": "s3:PutReplicationConfiguration", "Resource": f"arn:aws:s3:::{self.source}"}
        other_role = role(f"repl-other-{RUN}", REPLICATION_TRUST)
        callers = {
            "no PassRole": self.replicator("nopass", may_put),
            "PassRole on another role": self.replicator(
                "passother", may_put, {"Action": "iam:PassRole", "Resource": other_role}),
            "PassRole to another service": self.replicator(
                "passec2", may_put, {"Action": "iam:PassRole", "Resource": self.role, "Condition": {
                    "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}}),
        }
        for name, s3 in callers.items():
            with self.subTest(name):
                self.assertEqual(denied(self.put, [self.rule("all", 1)], s3),
                                 (403, "AccessDenied", "Access Denied"))
                self.assertIsNone(self.stored())
        # With PassRole on that role it may put a configuration naming it.
        self.put([self.rule("all", 1)], callers["PassRole on another role"], role_arn=other_role)
        self.assertEqual(self.stored()["Role"], other_role)
        S3.delete_bucket_replication(Bucket=self.source)

    def test_destinations_must_exist_and_be_versioned(self):
        refused = lambda rules, bucket=None: denied(self.put, rules, bucket=bucket)  # noqa: E731
        cases = {
            "no such bucket": (f"repl-none-{RUN}", "Destination bucket must exist."),
            "never versioned": (self.unversioned, "Destination bucket must have versioning enabled."),
            "versioning suspended": (self.suspended, "Destination bucket must have versioning enabled."),
        }
        for name, (destination, message) in cases.items():
            with self.subTest(name):
                # One good rule does not carry a bad one.
                rules = [self.rule("good", 1), self.rule("bad", 2, destination)]
                self.assertEqual(refused(rules), (400, "InvalidRequest", message))
                self.assertIsNone(self.stored())
        self.assertEqual(refused([self.rule("r", 1)], bucket=self.plain), (
            400, "InvalidRequest",
            "Versioning must be 'Enabled' on the bucket to apply a replication configuration"))
        bad_arn = self.rule("r", 1)
        bad_arn["Destination"]["Bucket"] = self.dest
        self.assertEqual(refused([bad_arn])[:2], (400, "InvalidArgument"))
        # Another account's versioned bucket is a destination (cross-account replication).
        self.put([self.rule("theirs", 1, self.theirs)])
        self.assertEqual(self.stored()["Rules"][0]["Destination"]["Bucket"], f"arn:aws:s3:::{self.theirs}")
        S3.delete_bucket_replication(Bucket=self.source)

    def test_rules_are_checked_as_s3_checks_them(self):
        no_marker = self.rule("b", 2)
        del no_marker["DeleteMarkerReplication"]
        tagged = self.rule("tagged", 1, Filter={"Tag": {"Key": "k", "Value": "v"}},
                           DeleteMarkerReplication={"Status": "Enabled"})
        tagged_and = self.rule("and", 1, Filter={"And": {"Prefix": "p/", "Tags": [
            {"Key": "k", "Value": "v"}]}}, DeleteMarkerReplication={"Status": "Enabled"})
        kms = {"SseKmsEncryptedObjects": {"Status": "Enabled"}}
        no_key = self.rule("kms", 1, SourceSelectionCriteria=kms)
        key_only = self.rule("key", 1)
        key_only["Destination"]["EncryptionConfiguration"] = {"ReplicaKmsKeyID": self.kms_key}
        v2 = " for this version of Cross Region Replication configuration schema. " \
             "Please refer to S3 Developer Guide for more information."
        cases = {
            "duplicate IDs": ([self.rule("same", 1), self.rule("same", 2)],
                              ("InvalidArgument", "Rule Id must be unique.")),
            "V2 without DeleteMarkerReplication": ([self.rule("a", 1), no_marker], (
                "InvalidRequest", "DeleteMarkerReplication must be specified" + v2)),
            "duplicate priorities": ([self.rule("a", 7), self.rule("b", 7)],
                                     ("InvalidRequest", "Found duplicate priority 7.")),
            "delete markers with a tag filter": ([tagged], (
                "InvalidRequest", "Delete marker replication is not supported if any Tag filter "
                "is specified. Please refer to S3 Developer Guide for more information.")),
            "delete markers with tags in And": ([tagged_and], (
                "InvalidRequest", "Delete marker replication is not supported if any Tag filter "
                "is specified. Please refer to S3 Developer Guide for more information.")),
            "SSE-KMS objects without a replica key": ([no_key], (
                "InvalidRequest",
                "ReplicaKmsKeyID must be specified if SseKmsEncryptedObjects tag is present.")),
            "a replica key without SSE-KMS objects": ([key_only], (
                "InvalidRequest",
                "SseKmsEncryptedObjects must be specified if EncryptionConfiguration is present.")),
        }
        for name, (rules, (code, message)) in cases.items():
            with self.subTest(name):
                self.assertEqual(denied(self.put, rules), (400, code, message))
                self.assertIsNone(self.stored())

    def test_a_v2_configuration_comes_back_as_it_was_put(self):
        rules = [
            {"ID": "tagged-logs", "Priority": 2, "Status": "Enabled",
             "Filter": {"And": {"Prefix": "logs/", "Tags": [
                 {"Key": "team", "Value": "a"}, {"Key": "tier", "Value": "gold"}]}},
             "SourceSelectionCriteria": {"SseKmsEncryptedObjects": {"Status": "Enabled"}},
             "Destination": {"Bucket": f"arn:aws:s3:::{self.dest}", "Account": ACCOUNT,
                             "StorageClass": "STANDARD_IA",
                             "AccessControlTranslation": {"Owner": "Destination"},
                             "EncryptionConfiguration": {"ReplicaKmsKeyID": self.kms_key}},
             "DeleteMarkerReplication": {"Status": "Disabled"}},
            {"ID": "data-elsewhere", "Priority": 1, "Status": "Disabled", "Filter": {"Prefix": "data/"},
             "Destination": {"Bucket": f"arn:aws:s3:::{self.theirs}", "Account": OTHER_ACCOUNT,
                             "StorageClass": "GLACIER"},
             "DeleteMarkerReplication": {"Status": "Enabled"}},
            {"ID": "one-tag", "Priority": 3, "Status": "Enabled",
             "Filter": {"Tag": {"Key": "copy", "Value": "yes"}},
             "Destination": {"Bucket": f"arn:aws:s3:::{self.dest}"},
             "DeleteMarkerReplication": {"Status": "Disabled"}},
        ]
        self.put(rules)
        self.addCleanup(S3.delete_bucket_replication, Bucket=self.source)
        self.assertEqual(self.stored(), {"Role": self.role, "Rules": rules})
        root = self.raw_answer()
        self.assertEqual(root.tag, f"{S3_NS}ReplicationConfiguration")
        self.assertEqual([c.tag for c in root], [f"{S3_NS}{t}" for t in ("Role", "Rule", "Rule", "Rule")])
        first = root.find(f"{S3_NS}Rule")
        self.assertEqual([c.tag.removeprefix(S3_NS) for c in first], [
            "ID", "Priority", "Filter", "Status", "SourceSelectionCriteria", "Destination",
            "DeleteMarkerReplication"])
        self.assertEqual([c.tag.removeprefix(S3_NS) for c in first.find(f"{S3_NS}Destination")], [
            "Bucket", "Account", "StorageClass", "AccessControlTranslation", "EncryptionConfiguration"])
        self.assertEqual([c.tag.removeprefix(S3_NS) for c in first.find(f"{S3_NS}Filter/{S3_NS}And")],
                         ["Prefix", "Tag", "Tag"])

    def test_a_v1_rule_comes_back_as_it_was_put_with_an_id(self):
        # No ID, no Priority, no DeleteMarkerReplication: the legacy schema (Prefix, no Filter).
        self.put([{"Prefix": "old/", "Status": "Enabled",
                   "Destination": {"Bucket": f"arn:aws:s3:::{self.dest}"}}])
        self.addCleanup(S3.delete_bucket_replication, Bucket=self.source)
        (rule,) = self.stored()["Rules"]
        self.assertTrue(rule.pop("ID"))
        self.assertEqual(rule, {"Prefix": "old/", "Status": "Enabled",
                                "Destination": {"Bucket": f"arn:aws:s3:::{self.dest}"}})
        self.assertEqual([c.tag.removeprefix(S3_NS) for c in self.raw_answer().find(f"{S3_NS}Rule")],
                         ["ID", "Prefix", "Status", "Destination"])

    def test_put_and_delete_are_cloudtrail_events_and_delete_leaves_none(self):
        self.assertIsNone(self.stored(self.trail))
        self.assertEqual(error_code(self.put, [self.rule("r", 1, f"repl-none-{RUN}")], bucket=self.trail),
                         "InvalidRequest")
        self.put([self.rule("r", 1)], bucket=self.trail)
        self.assertEqual(self.stored(self.trail)["Rules"][0]["ID"], "r")
        S3.delete_bucket_replication(Bucket=self.trail)
        self.assertIsNone(self.stored(self.trail))
        events = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10,
                                           WaitTimeSeconds=1).get("Messages", [])
            if not got:
                break
            events += [json.loads(m["Body"])["detail"] for m in got]
        # A refused put is recorded with its errorCode, as CloudTrail records it.
        self.assertEqual(sorted((e["eventName"], e.get("errorCode", "")) for e in events), [
            ("DeleteBucketReplication", ""), ("PutBucketReplication", ""),
            ("PutBucketReplication", "InvalidRequest")])


LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moto_server.py")
MEMBERS = ("111111111111", "222222222222")
ORG_ROLE = "OrganizationAccountAccessRole"


def launcher(env, port):
    """hack/moto_server.py on loopback with `env` added to this process's environment. Its
    output (a line a request) goes to a file, `.log` of the process, never to a pipe it could fill."""
    full = {k: v for k, v in os.environ.items() if k != "MOTO_ACCOUNT_ID"}
    log = tempfile.TemporaryFile(mode="w+")
    server = subprocess.Popen([sys.executable, LAUNCHER, "127.0.0.1", str(port)],
                              env={**full, **env}, stdout=log, stderr=subprocess.STDOUT)
    server.log = log
    return server


def output_of(server):
    server.log.seek(0)
    return server.log.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def denied(call, *args, **kwargs):
    """(HTTP status, code, message) of a refused call; None if it succeeded."""
    try:
        call(*args, **kwargs)
    except ClientError as e:
        error = e.response["Error"]
        return e.response["ResponseMetadata"]["HTTPStatusCode"], error["Code"], error.get("Message")
    return None


class MemberAccounts(unittest.TestCase):
    """Accounts as AWS Organizations makes them, and AssumeRole as STS checks it, on a launcher
    of this test's own with S3OP_EMULATOR_ACCOUNTS: the default account's admin (made by its
    three unauthenticated calls, as hack/aws_bootstrap.py makes it) gets into a member account
    through OrganizationAccountAccessRole and sets things up there."""

    @classmethod
    def setUpClass(cls):
        port = free_port()
        cls.server = launcher({"S3OP_EMULATOR_ACCOUNTS": ",".join(MEMBERS),
                               "INITIAL_NO_AUTH_ACTION_COUNT": "3"}, port)
        cls.endpoint = f"http://127.0.0.1:{port}"
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if cls.server.poll() is not None:
                    raise RuntimeError(f"the launcher exited: {output_of(cls.server)}")
                time.sleep(0.2)
        iam = cls.client("iam", "bootstrap", "bootstrap")
        iam.create_user(UserName="admin")
        iam.put_user_policy(UserName="admin", PolicyName="admin",
                            PolicyDocument=json.dumps(statement("*", "*")))
        key = iam.create_access_key(UserName="admin")["AccessKey"]
        cls.admin = (key["AccessKeyId"], key["SecretAccessKey"])
        cls.iam, cls.sts, cls.s3 = (cls.client(s, *cls.admin) for s in ("iam", "sts", "s3"))
        # The operator's principal in the default account: it may assume roles of the member
        # accounts (and tag their sessions), nothing else.
        cls.operator_arn = f"arn:aws:iam::{ACCOUNT}:user/operator"
        cls.operator = cls.user("operator", {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Resource": [f"arn:aws:iam::{m}:role/target-*" for m in MEMBERS]}]})
        cls.member = MEMBERS[0]
        cls.member_iam = cls.session("iam", cls.org_credentials(cls.member))

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(10)
        cls.server.log.close()

    @classmethod
    def client(cls, service, key, secret, token=None):
        return boto3.client(service, endpoint_url=cls.endpoint, region_name="us-east-1",
                            aws_access_key_id=key, aws_secret_access_key=secret,
                            aws_session_token=token)

    @classmethod
    def session(cls, service, creds):
        return cls.client(service, creds["AccessKeyId"], creds["SecretAccessKey"],
                          creds["SessionToken"])

    @classmethod
    def user(cls, name, policy):
        """Clients of a new user of the default account (sts, iam, s3), whose only policy is
        `policy`."""
        cls.iam.create_user(UserName=name)
        if policy:
            cls.iam.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
        key = cls.iam.create_access_key(UserName=name)["AccessKey"]
        return {s: cls.client(s, key["AccessKeyId"], key["SecretAccessKey"]) for s in ("sts", "iam", "s3")}

    @classmethod
    def org_credentials(cls, account, session_name="setup"):
        return cls.sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/{ORG_ROLE}",
                                   RoleSessionName=session_name)["Credentials"]

    def target(self, name, trust, policy=None, **extra):
        """A role of the member account, made through the admin's organization session."""
        arn = self.member_iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": trust}), **extra)["Role"]["Arn"]
        if policy:
            self.member_iam.put_role_policy(RoleName=name, PolicyName="p",
                                            PolicyDocument=json.dumps(policy))
        return arn

    def assert_refused(self, sts, role_arn, caller_arn, action="sts:AssumeRole", **params):
        self.assertEqual(denied(sts.assume_role, RoleArn=role_arn, RoleSessionName="op", **params), (
            403, "AccessDenied",
            f"User: {caller_arn} is not authorized to perform: {action} on resource: {role_arn}"))

    def test_the_organization_role_gets_the_admin_into_each_member_account(self):
        for account in MEMBERS:
            with self.subTest(account=account):
                creds = self.org_credentials(account)
                me = self.session("sts", creds).get_caller_identity()
                self.assertEqual((me["Arn"], me["Account"]),
                                 (f"arn:aws:sts::{account}:assumed-role/{ORG_ROLE}/setup", account))
                made = self.session("iam", creds).create_role(
                    RoleName="made-here", AssumeRolePolicyDocument=json.dumps(
                        {"Version": "2012-10-17", "Statement": []}))["Role"]["Arn"]
                self.assertEqual(made, f"arn:aws:iam::{account}:role/made-here")
        # Made in the member accounts only; the default account has neither role.
        for name in ("made-here", ORG_ROLE):
            self.assertEqual(error_code(self.iam.get_role, RoleName=name), "NoSuchEntity")
        # The trust names the default account: its principals need an identity policy for it.
        self.assert_refused(self.operator["sts"], f"arn:aws:iam::{MEMBERS[0]}:role/{ORG_ROLE}",
                            self.operator_arn)
        # An account that is no member has no such role.
        self.assert_refused(self.sts, f"arn:aws:iam::333333333333:role/{ORG_ROLE}",
                            f"arn:aws:iam::{ACCOUNT}:user/admin")

    def test_external_id(self):
        arn = self.target("target-extid", [{
            "Effect": "Allow", "Principal": {"AWS": self.operator_arn}, "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"sts:ExternalId": "tenant-7"}}}])
        sts = self.operator["sts"]
        creds = sts.assume_role(RoleArn=arn, RoleSessionName="op", ExternalId="tenant-7")["Credentials"]
        me = self.session("sts", creds).get_caller_identity()
        self.assertEqual((me["Arn"], me["Account"]),
                         (f"arn:aws:sts::{self.member}:assumed-role/target-extid/op", self.member))
        self.assert_refused(sts, arn, self.operator_arn, ExternalId="tenant-8")
        self.assert_refused(sts, arn, self.operator_arn)

    def test_the_trust_must_name_the_caller(self):
        self.iam.create_user(UserName="someone-else")
        other = f"arn:aws:iam::{ACCOUNT}:user/someone-else"
        arn = self.target("target-other", [{
            "Effect": "Allow", "Principal": {"AWS": other}, "Action": "sts:AssumeRole"}])
        self.assert_refused(self.operator["sts"], arn, self.operator_arn)
        self.assert_refused(self.sts, arn, f"arn:aws:iam::{ACCOUNT}:user/admin")
        # The caller's account, as its root or its bare id, and `*` name the caller.
        for name, principal in (("root", {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}),
                                ("id", {"AWS": ACCOUNT}), ("star", "*")):
            with self.subTest(principal=principal):
                arn = self.target(f"target-{name}", [
                    {"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}])
                self.operator["sts"].assume_role(RoleArn=arn, RoleSessionName="op")
        # A Deny naming the caller wins over the Allow.
        arn = self.target("target-denied", [
            {"Effect": "Allow", "Principal": "*", "Action": "sts:AssumeRole"},
            {"Effect": "Deny", "Principal": {"AWS": self.operator_arn}, "Action": "sts:AssumeRole",
             "Condition": {"StringLike": {"sts:RoleSessionName": "bad-*"}}}])
        self.operator["sts"].assume_role(RoleArn=arn, RoleSessionName="good")
        self.assertEqual(denied(self.operator["sts"].assume_role, RoleArn=arn,
                                RoleSessionName="bad-1")[1], "AccessDenied")

    def test_the_identity_policy_must_allow_the_role_arn(self):
        # The trust admits the operator, whose policy allows only roles named target-*.
        arn = self.target("untargeted", [
            {"Effect": "Allow", "Principal": {"AWS": self.operator_arn}, "Action": "sts:AssumeRole"}])
        self.assert_refused(self.operator["sts"], arn, self.operator_arn)

    def test_a_role_that_does_not_exist(self):
        for arn in (f"arn:aws:iam::{self.member}:role/target-none",
                    # It exists, in another account than the ARN names.
                    f"arn:aws:iam::{MEMBERS[1]}:role/target-extid"):
            with self.subTest(arn=arn):
                self.assert_refused(self.operator["sts"], arn, self.operator_arn)

    def test_session_tags_need_tag_session(self):
        admits = {"Effect": "Allow", "Principal": {"AWS": self.operator_arn}, "Action": "sts:AssumeRole"}
        untaggable = self.target("target-untaggable", [admits])
        sts = self.operator["sts"]
        tags = [{"Key": "team", "Value": "blue"}]
        self.assert_refused(sts, untaggable, self.operator_arn, "sts:TagSession", Tags=tags)
        self.assert_refused(sts, untaggable, self.operator_arn, "sts:TagSession",
                            TransitiveTagKeys=["team"], Tags=tags)
        sts.assume_role(RoleArn=untaggable, RoleSessionName="plain")
        taggable = self.target("target-taggable", [admits, {
            "Effect": "Allow", "Principal": {"AWS": self.operator_arn}, "Action": "sts:TagSession",
            "Condition": {"StringEquals": {"aws:RequestTag/team": "blue"},
                          "ForAllValues:StringEquals": {"aws:TagKeys": ["team"]}}}],
            statement("s3:ListAllMyBuckets", "*",
                      Condition={"StringEquals": {"aws:PrincipalTag/team": "blue"}}))
        creds = sts.assume_role(RoleArn=taggable, RoleSessionName="tagged", Tags=tags)["Credentials"]
        for name, other_tags in (("another value", [{"Key": "team", "Value": "red"}]),
                                 ("another key", tags + [{"Key": "x", "Value": "y"}])):
            with self.subTest(name):
                self.assert_refused(sts, taggable, self.operator_arn, "sts:TagSession", Tags=other_tags)
        # The session's tags are its aws:PrincipalTag: the role's policy asks for one.
        self.assertEqual(error_code(self.session("s3", creds).list_buckets), None)
        plain = sts.assume_role(RoleArn=taggable, RoleSessionName="plain")["Credentials"]
        self.assertEqual(error_code(self.session("s3", plain).list_buckets), "AccessDenied")
        # A source identity needs sts:SetSourceIdentity, which neither trust allows.
        self.assert_refused(sts, untaggable, self.operator_arn, "sts:SetSourceIdentity",
                            SourceIdentity="someone")

    def test_same_account_trust_naming_the_user_needs_no_identity_policy(self):
        # As AWS: in the role's own account a trust naming the user itself grants; one naming
        # the account defers to the user's identity policies (it has none).
        bare = self.user("bare", None)
        bare_arn = f"arn:aws:iam::{ACCOUNT}:user/bare"
        for name, principal, allowed in (("by-user", bare_arn, True),
                                         ("by-account", f"arn:aws:iam::{ACCOUNT}:root", False)):
            with self.subTest(name):
                arn = self.iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps({
                    "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {
                        "AWS": principal}, "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
                if allowed:
                    bare["sts"].assume_role(RoleArn=arn, RoleSessionName="bare")
                else:
                    self.assert_refused(bare["sts"], arn, bare_arn)

    def test_the_session_is_the_roles_in_its_account(self):
        events, sqs = self.client("events", *self.admin), self.client("sqs", *self.admin)
        url = sqs.create_queue(QueueName="trail")["QueueUrl"]
        queue = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="trail", EventPattern=json.dumps({"source": ["aws.s3"]}))
        events.put_targets(Rule="trail", Targets=[{"Id": "q", "Arn": queue}])
        root = {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "sts:AssumeRole"}
        arn = self.target("writer", [root], statement(
            ["s3:CreateBucket", "s3:PutObject", "s3:ListAllMyBuckets"], "*"))
        creds = self.sts.assume_role(RoleArn=arn, RoleSessionName="writer")["Credentials"]
        s3 = self.session("s3", creds)
        bucket = "member-bucket"
        s3.create_bucket(Bucket=bucket)
        put = dict(Bucket=bucket, Key="k", Body=b"x")
        s3.put_object(**put, ExpectedBucketOwner=self.member)
        self.assertEqual(error_code(s3.put_object, **put, ExpectedBucketOwner=ACCOUNT), "AccessDenied")
        self.assertIn(bucket, [b["Name"] for b in s3.list_buckets()["Buckets"]])
        self.assertNotIn(bucket, [b["Name"] for b in self.s3.list_buckets()["Buckets"]])
        # The role's policy, nothing more: not the admin's who assumed it.
        self.assertEqual(error_code(s3.delete_bucket, Bucket=bucket), "AccessDenied")
        self.assertEqual(error_code(self.session("iam", creds).create_user, UserName="x"), "AccessDenied")
        # Its CloudTrail events are the member account's: none reaches the default account's bus,
        # which gets the default account's own.
        self.s3.create_bucket(Bucket="default-bucket")
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        self.assertEqual([json.loads(m["Body"])["detail"]["requestParameters"]["bucketName"] for m in got],
                         ["default-bucket"])

    def test_boundary_and_session_policy_of_a_member_accounts_role(self):
        boundary = self.member_iam.create_policy(PolicyName="list-only", PolicyDocument=json.dumps(
            statement("s3:ListAllMyBuckets", "*")))["Policy"]["Arn"]
        self.assertTrue(boundary.startswith(f"arn:aws:iam::{self.member}:policy/"))
        root = {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "sts:AssumeRole"}
        bounded = self.target("bounded", [root], statement("s3:*", "*"), PermissionsBoundary=boundary)
        s3 = self.session("s3", self.sts.assume_role(RoleArn=bounded, RoleSessionName="bounded")["Credentials"])
        self.assertEqual(error_code(s3.list_buckets), None)
        self.assertEqual(error_code(s3.create_bucket, Bucket="bounded-bucket"), "AccessDenied")
        free = self.target("free", [root], statement("s3:*", "*"))
        narrowed = self.sts.assume_role(RoleArn=free, RoleSessionName="narrowed", Policy=json.dumps(
            statement("s3:ListAllMyBuckets", "*")))["Credentials"]
        s3 = self.session("s3", narrowed)
        self.assertEqual(error_code(s3.list_buckets), None)
        self.assertEqual(error_code(s3.create_bucket, Bucket="narrowed-bucket"), "AccessDenied")

    def test_keys_of_a_member_accounts_user(self):
        self.member_iam.create_user(UserName="worker")
        self.member_iam.put_user_policy(UserName="worker", PolicyName="p", PolicyDocument=json.dumps(
            statement(["s3:CreateBucket", "s3:ListBucket", "s3:ListAllMyBuckets"], "*")))
        key = self.member_iam.create_access_key(UserName="worker")["AccessKey"]
        me = self.client("sts", key["AccessKeyId"], key["SecretAccessKey"]).get_caller_identity()
        self.assertEqual((me["Arn"], me["Account"]),
                         (f"arn:aws:iam::{self.member}:user/worker", self.member))
        s3 = self.client("s3", key["AccessKeyId"], key["SecretAccessKey"])
        s3.create_bucket(Bucket="worker-bucket")
        listed = dict(Bucket="worker-bucket", Prefix="")
        self.assertEqual(error_code(s3.list_objects_v2, **listed, ExpectedBucketOwner=self.member), None)
        self.assertEqual(error_code(s3.list_objects_v2, **listed, ExpectedBucketOwner=ACCOUNT), "AccessDenied")
        self.assertNotIn("worker-bucket", [b["Name"] for b in self.s3.list_buckets()["Buckets"]])
        iam = self.client("iam", key["AccessKeyId"], key["SecretAccessKey"])
        self.assertEqual(error_code(iam.create_user, UserName="y"), "AccessDenied")

    def test_a_member_accounts_rule_forwards_to_the_home_bus_only_as_its_policy_allows(self):
        """A member account's writes are events of that account, made by the assumed-role
        session; its rule with the home account's default bus as target delivers them there
        (keeping their `account`) only once the bus's policy allows that rule, through a role
        EventBridge may assume for it and that may put events on that bus. Another member's
        rule, not in the policy, delivers nothing."""
        home_bus = f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/default"
        sqs, events = self.client("sqs", *self.admin), self.client("events", *self.admin)
        url = sqs.create_queue(QueueName="forwarded")["QueueUrl"]
        queue_arn = f"arn:aws:sqs:us-east-1:{ACCOUNT}:forwarded"
        pattern = json.dumps({"source": ["aws.s3"], "detail-type": ["AWS API Call via CloudTrail"]})
        events.put_rule(Name="home", EventPattern=pattern)
        events.put_targets(Rule="home", Targets=[{"Id": "q", "Arn": queue_arn}])
        self.addCleanup(events.delete_rule, Name="home")
        self.addCleanup(events.remove_targets, Rule="home", Ids=["q"])

        def forwarding(account, allowed=True):
            creds = self.org_credentials(account)
            iam, ev = self.session("iam", creds), self.session("events", creds)
            rule_arn = f"arn:aws:events:us-east-1:{account}:rule/forward"
            trust = {"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"aws:SourceAccount": account},
                              "ArnEquals": {"aws:SourceArn": rule_arn}}}]}
            role = iam.create_role(RoleName="forward", AssumeRolePolicyDocument=json.dumps(trust))
            iam.put_role_policy(RoleName="forward", PolicyName="p", PolicyDocument=json.dumps(
                statement("events:PutEvents", home_bus if allowed else f"{home_bus}-not")))
            ev.put_rule(Name="forward", EventPattern=pattern)
            ev.put_targets(Rule="forward", Targets=[
                {"Id": "home", "Arn": home_bus, "RoleArn": role["Role"]["Arn"]}])
            # The launcher is the class's: later tests' queues must not see these events.
            self.addCleanup(ev.delete_rule, Name="forward")
            self.addCleanup(ev.remove_targets, Rule="forward", Ids=["home"])
            return self.session("s3", creds), rule_arn

        def received():
            out = []
            while True:
                got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                          WaitTimeSeconds=1).get("Messages", [])
                if not got:
                    return out
                out += [json.loads(m["Body"]) for m in got]

        member, other = MEMBERS
        s3, rule_arn = forwarding(member)
        s3_other, other_rule = forwarding(other)
        s3.create_bucket(Bucket="fwd-before")
        self.assertEqual(received(), [], "the home bus's policy allows no other account yet")

        bus_policy = {"Version": "2012-10-17", "Statement": [{
            "Sid": "member", "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{member}:root"},
            "Action": "events:PutEvents", "Resource": home_bus,
            "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn},
                          "ForAllValues:StringEquals": {"events:source": ["aws.s3", "aws.iam"]}}}]}
        events.put_permission(Policy=json.dumps(bus_policy))
        s3.create_bucket(Bucket="fwd-after")
        s3_other.create_bucket(Bucket="fwd-other")
        got = received()
        self.assertEqual([e["detail"]["requestParameters"]["bucketName"] for e in got], ["fwd-after"])
        # Forwarded, it is still the member account's event, as EventBridge keeps it.
        self.assertEqual(got[0]["account"], member)
        self.assertEqual(got[0]["detail"]["recipientAccountId"], member)
        who = got[0]["detail"]["userIdentity"]
        self.assertEqual((who["type"], who["arn"]), (
            "AssumedRole", f"arn:aws:sts::{member}:assumed-role/{ORG_ROLE}/setup"))

        # A role not allowed PutEvents on the bus: nothing, though the bus would allow it.
        bus_policy["Statement"][0]["Principal"]["AWS"] = [
            f"arn:aws:iam::{member}:root", f"arn:aws:iam::{other}:root"]
        bus_policy["Statement"][0]["Condition"]["ArnEquals"]["aws:SourceArn"] = [rule_arn, other_rule]
        events.put_permission(Policy=json.dumps(bus_policy))
        s3_other.create_bucket(Bucket="fwd-other-2")
        self.assertEqual(len(received()), 1, "the other member's rule, now allowed by the bus")
        iam_other = self.session("iam", self.org_credentials(other))
        iam_other.put_role_policy(RoleName="forward", PolicyName="p", PolicyDocument=json.dumps(
            statement("events:PutEvents", f"{home_bus}-not")))
        s3_other.create_bucket(Bucket="fwd-other-3")
        self.assertEqual(received(), [], "its role may not put events on the bus")


class MemberAccountsVariable(unittest.TestCase):
    def test_an_id_that_is_not_an_account_stops_the_launcher(self):
        for value in ("12345", f"{MEMBERS[0]},{ACCOUNT}"):
            with self.subTest(value=value):
                server = launcher({"S3OP_EMULATOR_ACCOUNTS": value}, free_port())
                self.assertNotEqual(server.wait(60), 0)
                self.assertIn("S3OP_EMULATOR_ACCOUNTS", output_of(server))
                server.log.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
