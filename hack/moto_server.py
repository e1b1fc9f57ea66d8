"""Starts moto's server with IAM enforcement that evaluates policies the way AWS does for the
parts the operator relies on. Everything else is stock moto.

- Real IAM resource ARNs: stock moto authorizes IAM actions against "*" unless a role of that
  name exists, so a policy scoped to an IAM path would deny every user action. AWS evaluates
  `arn:aws:iam::<account>:user/<path>/<name>` (for a missing entity, the ARN without its path);
  this launcher does the same for users and roles, existing or about to be created, and for
  managed policies (`PolicyArn`, or the ARN CreatePolicy will give).
- Conditions: stock moto passes no request context to identity policies and treats a statement
  whose condition fails as an explicit deny. Here a condition is evaluated against the request's
  context keys (`iam:PermissionsBoundary`, `s3:prefix`, `aws:SecureTransport`, `aws:PrincipalArn`,
  `aws:PrincipalAccount`) with AWS's operators (String*, Arn*, Bool, Null, ...IfExists, and the
  set qualifiers ForAllValues:/ForAnyValue: for multivalued keys such as `aws:TagKeys`) and a
  statement whose condition does not hold simply does not apply.
- Permissions boundaries: stock moto has none for users and enforces none. Here CreateUser takes
  `PermissionsBoundary`, Put/DeleteUserPermissionsBoundary exist, GetUser reports it, and every
  request by a user or role with a boundary must be allowed by that boundary too.
- Bucket policies are evaluated for same-account callers, as AWS documents it (stock moto
  ignores them): an explicit Deny that names the caller (`*`, its user or role ARN, or its role
  session) and whose condition holds refuses the request, for the admin too; an Allow grants
  without any identity policy, and one that names the user or the role session itself is not
  capped by the caller's permissions boundary, while one naming the role or `*` is. A statement
  naming only the account defers to the identity policies. `aws:PrincipalArn` (the user's ARN, or
  the role's for a role session) is a condition key, and every request counts as made over TLS
  (`aws:SecureTransport` true), as it would be against AWS.
- Inactive access keys are refused, as AWS does (stock moto still accepts them).
- `x-amz-expected-bucket-owner` is honoured as S3 does: a request naming a bucket another
  account owns is refused with 403 AccessDenied (stock moto ignores the header).
- `aws:ResourceAccount` is a condition key of every request: the account in the resource's
  ARN, or for S3 (whose ARNs name none) the bucket owner's account; the caller's own for a
  bucket not yet created and for requests on no resource.
- CreateBucket with `Tags` in its CreateBucketConfiguration tags the new bucket in the same call
  (authorized as s3:TagResource), as S3 does; an existing bucket is never tagged this way.
- Object ownership as S3 has it since April 2023: a new bucket gets `BucketOwnerEnforced`
  (ACLs disabled) unless CreateBucket names another `ObjectOwnership`, which S3 authorizes as
  s3:PutBucketOwnershipControls too; Get/PutBucketOwnershipControls are checked against their own
  IAM actions (stock moto checks ListBucket/CreateBucket); with `BucketOwnerEnforced` a request
  that sets an ACL (other than `bucket-owner-full-control`) is refused with
  `AccessControlListNotSupported` (stock moto accepts every ACL).
- BlockPublicPolicy is enforced: with it on, PutBucketPolicy of a public policy (an Allow for
  `*` without a condition, moto's own test of publicness) is refused with AccessDenied, as S3
  does (stock moto stores it).
- SQS batch calls are authorized as their single-message actions (DeleteMessageBatch as
  sqs:DeleteMessage, ...), as AWS does.
- Bulk DeleteObjects is authorized as s3:DeleteObject on the objects; encryption and public
  access block requests are checked against the IAM actions AWS uses.
- The GetBucketVersioning answer's root element is `VersioningConfiguration`, and
  GetBucketAccelerateConfiguration's `AccelerateConfiguration`, as S3 names them.
- Object lock, intelligent tiering and transfer acceleration as S3 has them: the object lock
  configuration is authorized as s3:Get/PutBucketObjectLockConfiguration (stock moto checks
  ListBucket/CreateBucket) and CreateBucket with ObjectLockEnabledForBucket also needs
  s3:PutBucketObjectLockConfiguration and s3:PutBucketVersioning; the default retention of a
  bucket that already has object lock may change while it holds objects (stock moto refuses);
  Get/Put/Delete/ListBucketIntelligentTieringConfiguration(s) exist (stock moto has none),
  authorized as s3:Get/PutIntelligentTieringConfiguration.
- Attribute-based access control as S3 has it for general purpose buckets: Get/PutBucketAbac
  exist (stock moto has none), authorized as s3:GetBucketABAC / s3:PutBucketABAC, Disabled until
  set; with it Enabled, PutBucketTagging and DeleteBucketTagging are refused (tags then change only
  through S3 Control TagResource/UntagResource) and GetBucketTagging still answers, as S3
  documents. S3 does not document the refusal's error code: `InvalidRequest` here is a guess.
- GetBucketNotificationConfiguration reports `EventBridgeConfiguration` when it is on, as S3
  does (stock moto stores it, and sends events to EventBridge, but leaves it out of the answer),
  and names its root element `NotificationConfiguration` when the bucket has none (stock moto
  says `GetBucketNotificationResponse`, which the Rust SDK cannot read).
- PutBucketNotificationConfiguration refuses a queue or topic that does not exist with
  `InvalidArgument` ("Unable to validate the following destination configurations"), as S3
  does after its test message fails (stock moto stores any ARN).
- Server access logging as S3 has it for buckets with ACLs disabled: PutBucketLogging accepts a
  target whose bucket policy grants `logging.s3.amazonaws.com` `s3:PutObject` on the log keys in
  any of the forms S3 takes (single values or lists, `s3:*`, wildcards) and whose conditions
  (`aws:SourceArn`, `aws:SourceAccount`) admit the source bucket; a grant for other buckets, or
  the legacy LogDelivery ACL on a `BucketOwnerEnforced` target (S3 ignores its ACLs), is refused
  with InvalidTargetBucketForLogging. Stock moto takes only single values, ignores the
  conditions, and honours ACLs S3 disables.
- Bucket replication as S3 has it: Get/Put/DeleteBucketReplication are authorized as
  s3:GetReplicationConfiguration / s3:PutReplicationConfiguration (stock moto checks
  ListBucket/CreateBucket/DeleteBucket), and PutBucketReplication also as `iam:PassRole` on the
  configuration's `Role` (condition key `iam:PassedToService`: s3.amazonaws.com): a caller without
  it gets S3's 403 AccessDenied and nothing is stored. The configuration is checked as S3 checks
  it (stock moto checks only the source's versioning): each destination (`arn:aws:s3:::<name>`,
  else InvalidArgument "Invalid bucket ARN.") must be a bucket of one of the emulator's accounts
  with versioning Enabled (InvalidRequest "Destination bucket must exist." / "Destination bucket
  must have versioning enabled."); rule IDs must be unique (InvalidArgument);
  with a `Filter` in any rule (the V2 schema) every rule needs DeleteMarkerReplication, priorities
  must be unique and a tag filter rules out replicating delete markers (InvalidRequest); an
  `SseKmsEncryptedObjects` selection needs a `ReplicaKmsKeyID` and an EncryptionConfiguration
  needs that selection (InvalidRequest). GetBucketReplication answers the configuration as it was
  sent (stock moto drops Filter and SourceSelectionCriteria, always says DeleteMarkerReplication
  Disabled and adds a Priority), rooted at `ReplicationConfiguration` in S3's namespace with the
  members in the order of S3's API reference; a rule sent without an ID gets one, as in S3.
- IAM and STS refusals (AccessDenied, InvalidClientTokenId) come in the query protocol's error
  shape `ErrorResponse/Error/Code`, as AWS sends them; stock moto wraps them in `Errors` (EC2's
  shape), which the AWS SDKs for Rust and Go cannot read, so the code would be lost.
- AssumeRoleWithWebIdentity checks what STS checks (stock moto accepts any token for any role,
  and refuses the unsigned call once authentication is on): the token's issuer must be an IAM
  OIDC provider of the account, its `aud` one of the provider's client IDs, its RS256 signature
  one of the issuer's keys (fetched from the issuer's OpenID discovery document and JWKS, over
  TLS trusting `S3OP_OIDC_CA_BUNDLE`), its `exp` in the future, and a trust policy statement of
  the role must name the provider as `Federated` with conditions that hold for `<provider>:sub`
  and `<provider>:aud`. Refusals are STS's: InvalidIdentityToken, ExpiredTokenException,
  AccessDenied, IDPCommunicationError. The call is unsigned, as in AWS; the provider and the role
  are looked up in the account the role's ARN names.
- CloudTrail management events on EventBridge: every successful S3 bucket-level write
  (CreateBucket, Put/DeleteBucket<Subresource>, DeleteBucket, ...) and IAM write (any Action but
  Get*/List*/Generate*/Simulate*) is put on the default event bus of its region (IAM's
  in us-east-1, as CloudTrail records them) as an "AWS API Call via CloudTrail" event, source
  `aws.s3`/`aws.iam`, with CloudTrail's record as the detail (eventSource, eventName,
  userIdentity of the signing key, requestParameters: the bucket name, or IAM's parameters
  without documents), of the account of the signing key (a member account's calls never reach the
  default account's bus). Rules on that bus then send it on, for example to an SQS queue. Stock moto
  emits none; object-level data events are not emitted (CloudTrail needs a data-event trail).
- EventBridge across accounts (stock moto forwards to another account's bus unchecked, as an
  event of that account, and leaves `account` out of what a target receives): an event carries
  its `account`; a rule whose target is another account's event bus delivers there only if the
  target's role (when given) is the rule account's, trusts events.amazonaws.com for that rule
  (`aws:SourceArn`, `aws:SourceAccount`) and may events:PutEvents on the bus, and the bus's
  policy allows the rule's account (or that role) events:PutEvents with its conditions holding
  (`aws:SourceArn`, `aws:SourceAccount`, `events:source`, `events:detail-type`); otherwise the
  event is dropped (logged), as AWS counts it a failed invocation. The forwarded event keeps its
  `account`, `region`, `id` and `time`.
- EKS Pod Identity associations (stock moto has none): Create/Describe/List/Update/
  DeletePodIdentityAssociation on EKS's routes, authorized as `eks:<Action>` on the cluster
  (Create, List) or the association's ARN, Create and Update with a roleArn also as
  `iam:PassRole` on the role. One association per (cluster, namespace, serviceAccount)
  (ResourceInUseException), ResourceNotFoundException for an unknown cluster or association,
  and a `policy` must be JSON of at most 2,048 characters and comes with
  `disableSessionTags: true` (InvalidParameterException), as EKS documents. Every cluster's OIDC
  issuer is the environment's ServiceAccount issuer (`S3OP_SA_ISSUER`).
- EKS Auth AssumeRoleForPodIdentity (stock moto has no eks-auth), signed by the caller and
  authorized as `eks-auth:AssumeRoleForPodIdentity` on the cluster: the ServiceAccount token
  must come from the cluster's issuer with audience `pods.eks.amazonaws.com`, an RS256
  signature of the issuer's keys and an `exp` in the future (InvalidTokenException,
  ExpiredTokenException); its namespace and ServiceAccount must have an association
  (ResourceNotFoundException), and the association's role must trust the service
  `pods.eks.amazonaws.com` for sts:AssumeRole and sts:TagSession (AccessDeniedException). The
  answer is EKS Auth's, with credentials of a real role session that carries the association's
  policy and, unless disabled, EKS's six session tags (the Pod's name and uid from the token).
- Session policies (stock moto stores and ignores them): a role session made with one (AssumeRole's
  or AssumeRoleWithWebIdentity's `Policy`, a Pod Identity association's `policy`) may do only
  what both its role (capped by the boundary) and the session policy allow; a bucket policy
  naming the session itself is not narrowed by it, one naming the role is. A Pod Identity
  session's tags, and an AssumeRole session's `Tags`, are its condition keys
  `aws:PrincipalTag/<key>` (stock moto drops AssumeRole's `Tags`).
- Member accounts, as AWS Organizations makes them (stock moto has accounts but nothing in them):
  `S3OP_EMULATOR_ACCOUNTS` (comma-separated 12-digit ids, default none) creates at start, in each
  such account, the role `OrganizationAccountAccessRole`, whose trust policy lets the default
  account (123456789012, `arn:aws:iam::123456789012:root`: the management account) assume it and
  whose inline policy `AdministratorAccess` allows `*` on `*`. The default account's admin gets
  into a member account by AssumeRole on it; the session's requests (IAM users and roles it
  creates, S3 buckets) are the member account's, as are the keys of users made there.
- AssumeRole checks what STS checks (stock moto accepts any ARN, even of a role that does not
  exist, and checks the trust policy only of a role in the caller's own account, ignoring
  ExternalId): the role must exist in the account its ARN names; its trust policy must have an
  Allow for `sts:AssumeRole` whose Principal names the caller (`{"AWS": ...}` with its user ARN,
  its role's ARN or its role session's ARN, its account as `arn:aws:iam::<acct>:root` or the bare
  id, or `*`) and whose Condition holds with `sts:ExternalId` (absent when not given),
  `sts:RoleSessionName`, `sts:SourceIdentity`, `aws:PrincipalArn`, `aws:PrincipalAccount`,
  `aws:PrincipalTag/<key>` of a calling session, `aws:RequestTag/<key>` of each session tag,
  `aws:TagKeys` and `sts:TransitiveTagKeys`; a matching Deny refuses. Session tags (`Tags`,
  `TransitiveTagKeys`) need `sts:TagSession` and `SourceIdentity` needs `sts:SetSourceIdentity`,
  each allowed the same way. The caller's identity policies (with its boundary and session
  policy) must allow each action on the role's ARN too, except in the role's own account, where
  a trust statement naming the user or role session itself suffices and one naming the caller's
  role or `*` suffices within the boundary and session policy (as for bucket policies; one naming
  the account defers to the identity policies). A refusal is STS's 403 AccessDenied "User:
  <caller ARN> is not authorized to perform: <action> on resource: <role ARN>", and no credentials
  are issued. Not emulated: `NotPrincipal`/`NotAction` in trust policies (ignored), a trust
  policy's principals turning into unique ids when they are deleted, AWS's validation that a
  trust policy's principals exist, DurationSeconds beyond the role's MaxSessionDuration or one
  hour for role chaining, transitive session tags passed down a role chain, the role's own IAM
  tags as aws:PrincipalTag, and service control policies of an organization.
- A request log the tests read, since the operator's own counters cannot show what it did not
  count: every request is counted by (access key id, operation) when it arrives, before moto
  handles it, whatever the answer. `GET /__s3op/requests?key=ID` answers one key's counts as a
  JSON object (operation -> count). Operations are named as hack/fault_proxy.py names them: the
  Action for query protocol (IAM, STS); for S3 `METHOD service|bucket|object[?subresources]`.

Usage: python moto_server.py HOST PORT  (run with the moto virtualenv's python)
"""

import base64
import copy
import fnmatch
import io
import json
import os
import random
import re
import ssl
import string
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from urllib.parse import parse_qs, parse_qsl

import xmltodict
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.padding import PKCS1v15
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicNumbers
from cryptography.hazmat.primitives.hashes import SHA256
from werkzeug.serving import run_simple
import moto.backend_index as backend_index
import moto.eks.urls as _eks_urls
from moto import settings as moto_settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult, BaseResponse
from moto.core.utils import utcnow
from moto.eks.models import EKSBackend, eks_backends
from moto.eks.responses import EKSResponse
from moto.core.exceptions import AccessDeniedError, InvalidClientTokenIdError
from moto.core.responses import EmptyResult
from moto.iam import access_control
from moto.iam.access_control import IAMPolicy, PermissionResult
from moto.iam.exceptions import NotFoundException
from moto.iam.models import User, get_account_id_from, iam_backends
from moto.iam.responses import IamResponse
from moto.s3.exceptions import (
    InvalidArgumentError,
    MalformedXML,
    ReplicationConfigurationNotFoundError,
    S3ClientError,
    VersioningNotEnabledForReplication,
)
from moto.s3.models import FakeBucket, S3Backend, s3_backends
from moto.s3.responses import ACTION_MAP, S3Response
from moto.s3.utils import bucket_policy_is_public
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.utilities.utils import get_partition
from moto.core import DEFAULT_ACCOUNT_ID
from moto.events.models import Rule as EventsRule, events_backends
from moto.events.utils import EventTemplateParser
from moto.sns.models import sns_backends
from moto.sts.exceptions import STSClientError
from moto.sts.models import sts_backends
from moto.sts.responses import TokenResponse
from moto.sqs.models import sqs_backends


def _determine_resource(self) -> str:
    def first(key):
        values = self.data.get(key)
        return values[0] if values else None

    for key, kind, lookup in (
        ("UserName", "user", self.backend.get_user),
        ("RoleName", "role", self.backend.get_role),
    ):
        name = first(key)
        if name:
            try:
                return lookup(name).arn
            except Exception:  # not created yet: the ARN it will have
                path = first("Path") or "/"
                return f"arn:{self.partition}:iam::{self.current_account}:{kind}{path}{name}"
    # A managed policy (GetPolicy, CreatePolicyVersion, ...) is the resource of its own actions.
    if first("PolicyArn"):
        return first("PolicyArn")
    if first("PolicyName") and self._get_action() == "CreatePolicy":
        path = first("Path") or "/"
        return f"arn:{self.partition}:iam::{self.current_account}:policy{path}{first('PolicyName')}"
    return "*"


IamResponse._determine_resource = _determine_resource

_bucket_actions = ACTION_MAP["BUCKET"]
for _method, _encryption, _pab in (
    ("GET", "GetEncryptionConfiguration", "GetBucketPublicAccessBlock"),
    ("PUT", "PutEncryptionConfiguration", "PutBucketPublicAccessBlock"),
    ("DELETE", "PutEncryptionConfiguration", "PutBucketPublicAccessBlock"),
):
    _bucket_actions[_method]["encryption"] = _encryption
    _bucket_actions[_method]["publicAccessBlock"] = _pab
for _method, _ownership in (
    ("GET", "GetBucketOwnershipControls"),
    ("PUT", "PutBucketOwnershipControls"),
    ("DELETE", "PutBucketOwnershipControls"),
):
    _bucket_actions[_method]["ownershipControls"] = _ownership

for _method, _lock, _tiering in (
    ("GET", "GetBucketObjectLockConfiguration", "GetIntelligentTieringConfiguration"),
    ("PUT", "PutBucketObjectLockConfiguration", "PutIntelligentTieringConfiguration"),
    ("DELETE", None, "PutIntelligentTieringConfiguration"),
):
    if _lock:
        _bucket_actions[_method]["object-lock"] = _lock
    _bucket_actions[_method]["intelligent-tiering"] = _tiering
# Replication: stock moto has no entry, so it checked ListBucket/CreateBucket/DeleteBucket.
for _method, _replication in (
    ("GET", "GetReplicationConfiguration"),
    ("PUT", "PutReplicationConfiguration"),
    ("DELETE", "PutReplicationConfiguration"),
):
    _bucket_actions[_method]["replication"] = _replication

_get_bucket_versioning = S3Response.get_bucket_versioning


def _get_bucket_versioning_as_s3(self):
    status, headers, body = _get_bucket_versioning(self)
    if isinstance(body, bytes):
        body = body.replace(b"GetBucketVersioningResponse", b"VersioningConfiguration")
    else:
        body = body.replace("GetBucketVersioningResponse", "VersioningConfiguration")
    return status, headers, body


S3Response.get_bucket_versioning = _get_bucket_versioning_as_s3

_get_bucket_accelerate = S3Response.get_bucket_accelerate_configuration


def _get_bucket_accelerate_as_s3(self):
    status, headers, body = _get_bucket_accelerate(self)
    old, new = "GetBucketAccelerateConfigurationResponse", "AccelerateConfiguration"
    if isinstance(body, bytes):
        body = body.replace(old.encode(), new.encode())
    else:
        body = body.replace(old, new)
    return status, headers, body


S3Response.get_bucket_accelerate_configuration = _get_bucket_accelerate_as_s3

_authorize_s3 = S3Response._authenticate_and_authorize_s3_action


def _authorize_bulk_delete_on_objects(self, bucket_name=None, key_name=None):
    if key_name is None and bucket_name and self.data.get("Action") == "DeleteObject":
        key_name = "*"
    return _authorize_s3(self, bucket_name=bucket_name, key_name=key_name)


S3Response._authenticate_and_authorize_s3_action = _authorize_bulk_delete_on_objects

# Bucket policies are evaluated with the caller's principal and condition keys in
# _check_action_permitted. Stock moto also checks object requests (and each key of a bulk delete)
# against the bucket policy with neither, before authorization, and answers a Deny with an empty
# 403, where S3 sends AccessDenied and never denies a principal a condition exempts.
FakeBucket.get_permission = lambda self, action, resource: PermissionResult.NEUTRAL

# ---------------------------------------------------------------- conditions


def _first(value):
    return value[0] if isinstance(value, list) and value else value


def _matches(op, expected, actual):
    """One condition operator (without its IfExists/Not parts) on one actual value."""
    if op in ("StringEquals", "ArnEquals"):
        return actual == expected
    if op == "StringEqualsIgnoreCase":
        return actual.lower() == expected.lower()
    if op in ("StringLike", "ArnLike"):
        return fnmatch.fnmatchcase(actual, expected)
    if op == "Bool":
        return actual.lower() == str(expected).lower()
    raise ValueError(f"condition operator {op} is not supported by this emulator")


def condition_holds(conditions, context):
    """AWS semantics: every operator and key must hold; a missing key fails positive operators
    and satisfies negated ones; `...IfExists` ignores a missing key; `Null` tests presence. A
    multivalued key (a list: aws:TagKeys) takes the set qualifiers: `ForAllValues:` holds when
    every value matches (also when there is none), `ForAnyValue:` when one does; unqualified, one
    matching value suffices."""
    for operator, keys in (conditions or {}).items():
        qualifier, _, operator = operator.rpartition(":")
        if_exists = operator.endswith("IfExists")
        op = operator[: -len("IfExists")] if if_exists else operator
        for key, expected in keys.items():
            expected = expected if isinstance(expected, list) else [expected]
            actual = context.get(key)
            if op == "Null":
                if any(str(e).lower() == "true" for e in expected) != (actual is None):
                    return False
                continue
            negated = "Not" in op
            base = op.replace("Not", "", 1)

            def hit(value):
                return any(_matches(base, str(e), str(value)) for e in expected) != negated

            values = actual if isinstance(actual, list) else [] if actual is None else [actual]
            if qualifier == "ForAllValues":
                if not all(hit(v) for v in values):
                    return False
                continue
            if qualifier == "ForAnyValue":
                if not any(hit(v) for v in values):
                    return False
                continue
            if actual is None:
                if if_exists or negated:
                    continue
                return False
            if negated:
                if not all(hit(v) for v in values):
                    return False
            elif not any(hit(v) for v in values):
                return False
    return True


def _statement_result(self, action, resource="*", principal=None, incoming=None):
    statement = self._statement
    concerned = (
        not self._check_element_matches("NotAction", action)
        if "NotAction" in statement
        else self._check_element_matches("Action", action)
    )
    if not concerned:
        return PermissionResult.NEUTRAL
    if self.is_unknown_principal(statement.get("Principal")):
        return PermissionResult.NEUTRAL
    if principal and not self._check_principal(principal):
        return PermissionResult.DENIED
    if "Condition" in statement and not condition_holds(statement["Condition"], incoming or {}):
        return PermissionResult.NEUTRAL
    if statement.get("Resource") and not self._check_element_matches("Resource", resource):
        return PermissionResult.NEUTRAL
    return PermissionResult.PERMITTED if statement["Effect"] == "Allow" else PermissionResult.DENIED


access_control.IAMPolicyStatement.is_action_permitted = _statement_result


def _boundary_of(backend, kind, name):
    """The permissions boundary ARN of an existing user or role, else None."""
    try:
        entity = backend.get_user(name) if kind == "user" else backend.get_role(name)
    except Exception:
        return None
    return getattr(entity, "permissions_boundary_arn", None)


def _resource_account(self, resource):
    """aws:ResourceAccount: the account of the resource the request acts on. An ARN that names
    no account (S3's) is its bucket's owner's; a bucket that does not exist yet, or no resource
    at all, is the caller's own (CreateBucket, ListAllMyBuckets)."""
    parts = resource.split(":", 5)
    if len(parts) == 6 and parts[4]:
        return parts[4]
    if len(parts) == 6 and parts[2] == "s3":
        owner = s3_backends.bucket_accounts.get(parts[5].split("/", 1)[0])
        if owner:
            return owner[1]
    return self.account_id


def _request_context(self, resource="*"):
    """The condition keys of this request that the operator's policies use. Requests reach the
    emulator over loopback HTTP but stand for the TLS requests every AWS endpoint takes, so
    aws:SecureTransport is true (the operator's TLS-only bucket policy statement binds no one)."""
    data = self._data or {}
    context = {"aws:SecureTransport": "true",
               "aws:ResourceAccount": _resource_account(self, resource),
               "aws:PrincipalAccount": self.account_id}
    principal_arn = _caller_principal(self)[0]
    if principal_arn:
        context["aws:PrincipalArn"] = principal_arn
    session = _role_session(self)
    for key, value in (getattr(session, "session_tags", None) or {}).items():
        context[f"aws:PrincipalTag/{key}"] = value
    if self._service == "iam":
        boundary = _first(data.get("PermissionsBoundary"))
        if boundary is None:
            for key, kind in (("UserName", "user"), ("RoleName", "role")):
                name = _first(data.get(key))
                if name:
                    boundary = _boundary_of(self.backend, kind, name)
                    break
        if boundary:
            context["iam:PermissionsBoundary"] = boundary
    elif self._service == "s3":
        prefix = _first(data.get("prefix"))
        if prefix is not None:
            context["s3:prefix"] = prefix
        if self._action == "iam:PassRole":  # PutBucketReplication's role, passed to S3
            context["iam:PassedToService"] = "s3.amazonaws.com"
    return context


def _caller_principal(self):
    """(aws:PrincipalArn, the ARNs a resource policy may name the caller by directly). For a user
    both are its ARN with its path; for a role session, aws:PrincipalArn is the role's ARN and the
    direct name is the session's assumed-role ARN."""
    key = self._access_key
    try:
        if hasattr(key, "_owner_user_name"):
            arn = self.backend.get_user(key._owner_user_name).arn
            return arn, {arn}
        role = self.backend.get_role(getattr(key, "_owner_role_name", ""))
        return role.arn, {key.arn}
    except Exception:
        return None, set()


def _iam_like(pattern, value, ignore_case=False):
    if ignore_case:
        pattern, value = pattern.lower(), value.lower()
    return fnmatch.fnmatchcase(value, pattern)


def _principal_kind(principal, caller_arn, direct, account, partition):
    """How a bucket policy statement's Principal names the caller: "direct" (its user or role
    session ARN: not capped by a permissions boundary), "capped" (its role's ARN, or everyone:
    the boundary still applies), "account" (the caller's account: the identity policy decides),
    or None."""
    if principal == "*":
        return "capped"
    names = _as_list((principal or {}).get("AWS"))
    if "*" in names:
        return "capped"
    if any(n in direct for n in names):
        return "direct"
    if caller_arn and caller_arn in names:
        return "capped"
    if any(n in (account, f"arn:{partition}:iam::{account}:root") for n in names):
        return "account"
    return None


def _bucket_policy_decision(self, resource, context):
    """AWS's evaluation of a same-account bucket policy for this request: "deny" (an explicit
    Deny applies), else the set of ways an Allow names the caller."""
    if self._service != "s3" or ":::" not in resource:
        return set()
    name = resource.split(":::", 1)[1].split("/", 1)[0]
    bucket = s3_backends[self.account_id][get_partition(self._region)].buckets.get(name)
    policy = getattr(bucket, "policy", None)
    if not policy:
        return set()
    doc = json.loads(policy)
    caller_arn, direct = _caller_principal(self)
    partition = resource.split(":")[1]
    allows = set()
    for st in _as_list(doc.get("Statement")):
        if not any(_iam_like(a, self._action, True) for a in _as_list(st.get("Action"))):
            continue
        if not any(_iam_like(r, resource) for r in _as_list(st.get("Resource"))):
            continue
        kind = _principal_kind(st.get("Principal"), caller_arn, direct, self.account_id, partition)
        if kind is None:
            continue
        if "Condition" in st and not condition_holds(st["Condition"], context):
            continue
        if st.get("Effect") == "Deny":
            return "deny"
        allows.add(kind)
    return allows


def _caller_boundary(self):
    key = self._access_key
    if hasattr(key, "_owner_user_name"):
        arn = _boundary_of(self.backend, "user", key._owner_user_name)
    else:
        arn = _boundary_of(self.backend, "role", getattr(key, "_owner_role_name", ""))
    if not arn:
        return None
    try:
        return self.backend.get_policy(arn)
    except NotFoundException:
        return None


# SQS authorizes a batch call as its single-message action (stock moto asks for the batch name).
_AUTHORIZED_AS = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}


def _role_session(self):
    """The STS role session of the caller's key (moto's AssumedRole), else None."""
    key = self._access_key
    if not hasattr(key, "_owner_role_name"):
        return None
    sessions = sts_backends[self.account_id][get_partition(self._region)]
    return sessions.get_assumed_role_from_access_key(key._access_key_id)


def _session_policy_result(self, resource, context):
    """The caller's session policy's answer for the request, None for a caller without one."""
    policy = getattr(_role_session(self), "policy", None)
    if not policy:
        return None
    return IAMPolicy(policy).is_action_permitted(self._action, resource, None, context)


def _identity_decision(self, resource, context):
    """"deny" (an explicit Deny of the caller's identity policies or session policy), else
    (an identity policy allows, the permissions boundary allows, the session policy allows)."""
    permitted = False
    for policy in self._access_key.collect_policies():
        result = IAMPolicy(policy).is_action_permitted(self._action, resource, None, context)
        if result == PermissionResult.DENIED:
            return "deny"
        permitted = permitted or result == PermissionResult.PERMITTED
    session = _session_policy_result(self, resource, context)
    if session == PermissionResult.DENIED:
        return "deny"
    boundary = _caller_boundary(self)
    within_boundary = boundary is None or (
        IAMPolicy(boundary).is_action_permitted(self._action, resource, None, context)
        == PermissionResult.PERMITTED
    )
    return permitted, within_boundary, session in (None, PermissionResult.PERMITTED)


def _check_action_permitted(self, resource):
    if self._action == "sts:GetCallerIdentity":
        return
    self._action = _AUTHORIZED_AS.get(self._action, self._action)
    if self._action == "sts:AssumeRole":
        return _check_assume_role(self, resource)
    context = _request_context(self, resource)
    identity = _identity_decision(self, resource, context)
    if identity == "deny":
        self._raise_access_denied()
    permitted, within_boundary, within_session = identity
    resource_policy = _bucket_policy_decision(self, resource, context)
    if resource_policy == "deny":
        self._raise_access_denied()
    # Same account: an identity-policy or a resource-policy Allow suffices; the boundary and
    # the session policy cap both, except a resource policy that names the user or role
    # session itself.
    permitted = (
        "direct" in resource_policy
        or ((permitted or "capped" in resource_policy) and within_boundary and within_session)
    )
    if not permitted:
        self._raise_access_denied()


# ---------------------------------------------------------------- AssumeRole as STS checks it


def _role_of_arn(role_arn, partition):
    """The role an ARN names, looked up in the account the ARN names, else None."""
    parts = (role_arn or "").split(":", 5)
    if len(parts) != 6 or parts[2] != "iam" or not parts[5].startswith("role/"):
        return None
    try:
        return iam_backends[parts[4]][partition].get_role_by_arn(role_arn)
    except (NotFoundException, KeyError):
        return None


def _session_tags_of(data):
    """AssumeRole's `Tags.member.N.Key/Value`, as {key: value}."""
    tags = {}
    for name, value in (data or {}).items():
        found = re.fullmatch(r"Tags\.member\.(\d+)\.Key", name)
        if found:
            tags[_first(value)] = _first(data.get(f"Tags.member.{found.group(1)}.Value")) or ""
    return tags


def _assume_role_context(self, role_arn):
    """The request context STS evaluates AssumeRole's policies with."""
    data = self._data or {}
    context = _request_context(self, role_arn)
    context["sts:RoleSessionName"] = _first(data.get("RoleSessionName"))
    for param, key in (("ExternalId", "sts:ExternalId"), ("SourceIdentity", "sts:SourceIdentity")):
        if _first(data.get(param)) is not None:
            context[key] = _first(data.get(param))
    tags = _session_tags_of(data)
    for key, value in tags.items():
        context[f"aws:RequestTag/{key}"] = value
    if tags:
        context["aws:TagKeys"] = list(tags)
    transitive = [_first(v) for k, v in sorted(data.items()) if k.startswith("TransitiveTagKeys.member.")]
    if transitive:
        context["sts:TransitiveTagKeys"] = transitive
    return {k: v for k, v in context.items() if v is not None}


def _trust_decision(self, role, context):
    """The role's trust policy for this request (self._action): "deny" (a Deny statement naming
    the caller applies), else the set of ways its applying Allow statements name the caller
    (see _principal_kind: the caller's account is the account of its key)."""
    try:
        trust = json.loads(role.assume_role_policy_document)
    except Exception:
        return set()
    caller_arn, direct = _caller_principal(self)
    partition = role.arn.split(":")[1]
    allows = set()
    for st in _as_list(trust.get("Statement")):
        if not any(_iam_like(a, self._action, True) for a in _as_list(st.get("Action"))):
            continue
        kind = _principal_kind(st.get("Principal"), caller_arn, direct, self.account_id, partition)
        if kind is None:
            continue
        if "Condition" in st and not condition_holds(st["Condition"], context):
            continue
        if st.get("Effect") == "Deny":
            return "deny"
        allows.add(kind)
    return allows


def _assume_permitted(self, role, context):
    """STS's decision for one action of an AssumeRole request (sts:AssumeRole, sts:TagSession,
    sts:SetSourceIdentity) on an existing role: the trust policy must allow it for the caller,
    and so must the caller's identity policies (capped by its permissions boundary and session
    policy), except in the role's own account where a trust statement naming the user or role
    session itself suffices, and one naming its role or `*` suffices within the caps, as for a
    bucket policy. An explicit Deny in either refuses."""
    trust = _trust_decision(self, role, context)
    if trust == "deny" or not trust:
        return False
    identity = _identity_decision(self, role.arn, context)
    if identity == "deny":
        return False
    permitted, within_boundary, within_session = identity
    if role.account_id != self.account_id:
        return permitted and within_boundary and within_session
    return "direct" in trust or (
        (permitted or "capped" in trust) and within_boundary and within_session)


def _check_assume_role(self, role_arn):
    """AssumeRole as STS authorizes it (stock moto checks the trust policy of a role of the
    caller's own account only, and accepts any ARN of another account, even of no role). Session
    tags also need sts:TagSession, a source identity sts:SetSourceIdentity. Refused with
    AccessDenied "User: <caller> is not authorized to perform: <action> on resource: <role>"."""
    data = self._data or {}
    role = _role_of_arn(role_arn, get_partition(self._region))
    context = _assume_role_context(self, role_arn) if role is not None else {}
    actions = ["sts:AssumeRole"]
    if "aws:TagKeys" in context or "sts:TransitiveTagKeys" in context:
        actions.append("sts:TagSession")
    if _first(data.get("SourceIdentity")) is not None:
        actions.append("sts:SetSourceIdentity")
    for action in actions:
        self._action = action
        if role is None or not _assume_permitted(self, role, context):
            raise _query_shaped(AccessDeniedError(
                user_arn=self._access_key.arn, action=f"{action} on resource: {role_arn}"))
    self._action = "sts:AssumeRole"


access_control.IAMRequestBase.check_action_permitted = _check_action_permitted

# ---------------------------------------------------------------- query-protocol error shape


def _query_shaped(error):
    """The error with AWS's query-protocol body: ErrorResponse/Error, not ErrorResponse/Errors."""
    body = {"Code": error.error_type, "Message": error.message, "Type": "Sender"}
    error.description = xmltodict.unparse({"ErrorResponse": {"Error": body}}, full_document=True)
    return error


def _query_access_denied(self):
    raise _query_shaped(AccessDeniedError(user_arn=self._access_key.arn, action=self._action))


def _query_invalid_key(self, reason):
    if self._service == "ec2":
        return _stock_invalid_key(self, reason)
    raise _query_shaped(InvalidClientTokenIdError())


_stock_invalid_key = access_control.IAMRequest._raise_invalid_access_key
access_control.IAMRequest._raise_access_denied = _query_access_denied
access_control.IAMRequest._raise_invalid_access_key = _query_invalid_key

# ---------------------------------------------------------------- inactive keys

_user_key_init = access_control.IAMUserAccessKey.__init__


def _active_user_key_init(self, account_id, partition, access_key_id, headers):
    _user_key_init(self, account_id, partition, access_key_id, headers)
    user = iam_backends[account_id][partition].get_user(self._owner_user_name)
    for key in user.access_keys:
        if key.access_key_id == access_key_id and key.status != "Active":
            raise access_control.CreateAccessKeyFailure(reason="InvalidId")


access_control.IAMUserAccessKey.__init__ = _active_user_key_init

# ---------------------------------------------------------------- user permissions boundaries


def _user_boundary(self):
    arn = getattr(self, "permissions_boundary_arn", None)
    if arn:
        return {"PermissionsBoundaryType": "PermissionsBoundaryPolicy", "PermissionsBoundaryArn": arn}
    return None


User.permissions_boundary = property(_user_boundary)


def _checked_boundary(self):
    arn = self._get_param("PermissionsBoundary")
    if arn:
        self.backend.get_policy(arn)  # NoSuchEntity, as AWS, for a policy that does not exist
    return arn


_create_user = IamResponse.create_user


def _create_user_with_boundary(self):
    arn = _checked_boundary(self)
    result = _create_user(self)
    if arn:
        self.backend.get_user(self._get_param("UserName")).permissions_boundary_arn = arn
    return result


def _put_user_permissions_boundary(self):
    arn = _checked_boundary(self)
    self.backend.get_user(self._get_param("UserName")).permissions_boundary_arn = arn
    return EmptyResult()


def _delete_user_permissions_boundary(self):
    self.backend.get_user(self._get_param("UserName")).permissions_boundary_arn = None
    return EmptyResult()


IamResponse.create_user = _create_user_with_boundary
IamResponse.put_user_permissions_boundary = _put_user_permissions_boundary
IamResponse.delete_user_permissions_boundary = _delete_user_permissions_boundary

# ---------------------------------------------------------------- CreateBucket with tags
# ---------------------------------------------------------------- and object ownership

_bucket_put = S3Response._bucket_response_put


def _creation_tags(body):
    try:
        config = xmltodict.parse(body)["CreateBucketConfiguration"] or {}
    except Exception:
        return {}
    tags = (config.get("Tags") or {}).get("Tag") or []
    tags = tags if isinstance(tags, list) else [tags]
    return {t["Key"]: t.get("Value") or "" for t in tags}


class PublicPolicyBlocked(S3ClientError):
    code = "AccessDenied"

    def __init__(self):
        super().__init__("AccessDenied", "Access Denied: the bucket's BlockPublicPolicy refuses a public policy")


def _refuse_public_policy(self, bucket_name, querystring):
    bucket = self.backend.buckets.get(bucket_name)
    pab = bucket.public_access_block if bucket is not None else None
    if "policy" in querystring and pab is not None and pab.block_public_policy:
        if bucket_policy_is_public(self.body):
            raise PublicPolicyBlocked()


class AccessControlListNotSupported(S3ClientError):
    code = "AccessControlListNotSupported"

    def __init__(self):
        super().__init__("AccessControlListNotSupported", "The bucket does not allow ACLs")


def _refuse_acls(self, bucket_name, sets_acl):
    bucket = self.backend.buckets.get(bucket_name)
    if sets_acl and bucket is not None and bucket.ownership_rule == "BucketOwnerEnforced":
        raise AccessControlListNotSupported()


def _sets_acl(headers, query):
    if "acl" in query or any(k.lower().startswith("x-amz-grant-") for k in headers.keys()):
        return True
    return headers.get("x-amz-acl", "bucket-owner-full-control") != "bucket-owner-full-control"


def _bucket_put_with_tags(self, request, bucket_name, querystring):
    if querystring:
        _refuse_acls(self, bucket_name, _sets_acl(request.headers, querystring))
        _refuse_public_policy(self, bucket_name, querystring)
        return _bucket_put(self, request, bucket_name, querystring)
    tags = _creation_tags(self.body) if self.body else {}
    if tags:
        self.data["Action"] = "TagResource"
        self._authenticate_and_authorize_s3_action(bucket_name=bucket_name)
    if request.headers.get("x-amz-object-ownership"):
        self.data["Action"] = "PutBucketOwnershipControls"
        self._authenticate_and_authorize_s3_action(bucket_name=bucket_name)
    if request.headers.get("x-amz-bucket-object-lock-enabled", "").lower() == "true":
        for action in ("PutBucketObjectLockConfiguration", "PutBucketVersioning"):
            self.data["Action"] = action
            self._authenticate_and_authorize_s3_action(bucket_name=bucket_name)
    existed = bucket_name in self.backend.buckets
    result = _bucket_put(self, request, bucket_name, querystring)
    bucket = self.backend.buckets.get(bucket_name)
    if not existed and bucket is not None:
        if tags:
            self.backend.put_bucket_tagging(bucket_name, tags)
        bucket.ownership_rule = bucket.ownership_rule or "BucketOwnerEnforced"
    return result


S3Response._bucket_response_put = _bucket_put_with_tags

_key_put = S3Response._key_response_put


def _key_put_without_acls(self, query, key_name):
    _refuse_acls(self, self.bucket_name, _sets_acl(self.headers, query))
    return _key_put(self, query, key_name)


S3Response._key_response_put = _key_put_without_acls

# ---------------------------------------------------------------- tags die with their bucket

_delete_bucket = S3Backend.delete_bucket


def _delete_bucket_and_its_tags(self, bucket_name):
    """S3 deletes a bucket's tags with it. Stock moto keeps them under the bucket's ARN, so a
    bucket made again with that name, without tags, answered with its predecessor's: the old
    owner's ownership tags, and a grant that followed the name to whoever made it again."""
    deleted = _delete_bucket(self, bucket_name)
    if deleted is not None:
        self.tagger.delete_all_tags_for_resource(deleted.arn)
    return deleted


S3Backend.delete_bucket = _delete_bucket_and_its_tags

# ---------------------------------------------------------------- object lock retention changes

_put_lock = S3Backend.put_object_lock_configuration


def _put_lock_on_locked_bucket(self, bucket_name, lock_enabled, mode=None, days=None, years=None):
    """S3 lets the default retention of a bucket with object lock change while it holds objects;
    stock moto refuses any change once the bucket has a key."""
    bucket = self.get_bucket(bucket_name)
    if not bucket.object_lock_enabled:
        return _put_lock(self, bucket_name, lock_enabled, mode, days, years)
    bucket.default_lock_mode = mode
    bucket.default_lock_days = days
    bucket.default_lock_years = years


S3Backend.put_object_lock_configuration = _put_lock_on_locked_bucket

# ---------------------------------------------------------------- bucket subresources moto lacks


def _route_bucket_subresource(subresource, handler):
    """Sends a bucket's GET, PUT and DELETE of `?<subresource>` to `handler(self, bucket_name,
    querystring, method)`, which moto lacks; every other bucket request goes on to the handlers
    installed before."""
    get, put = S3Response._bucket_response_get, S3Response._bucket_response_put
    delete = S3Response._bucket_response_delete

    def routed_get(self, bucket_name, querystring):
        if subresource in querystring:
            return handler(self, bucket_name, querystring, "GET")
        return get(self, bucket_name, querystring)

    def routed_put(self, request, bucket_name, querystring):
        if subresource in querystring:
            return handler(self, bucket_name, querystring, "PUT")
        return put(self, request, bucket_name, querystring)

    def routed_delete(self, bucket_name, querystring):
        if subresource in querystring:
            return handler(self, bucket_name, querystring, "DELETE")
        return delete(self, bucket_name, querystring)

    S3Response._bucket_response_get = routed_get
    S3Response._bucket_response_put = routed_put
    S3Response._bucket_response_delete = routed_delete


# ---------------------------------------------------------------- intelligent tiering


class NoSuchConfiguration(S3ClientError):
    def __init__(self):
        super().__init__("NoSuchConfiguration", "The specified configuration does not exist.")


_TIERING_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _tiering_configs(bucket):
    if not hasattr(bucket, "intelligent_tiering"):
        bucket.intelligent_tiering = {}
    return bucket.intelligent_tiering


def _tiering_request(self, bucket_name, querystring, method):
    """Get/Put/Delete/ListBucketIntelligentTieringConfiguration(s): the configuration is kept as
    the parsed XML document S3 was sent and answered as S3 answers it."""
    self.data["Action"] = "PutIntelligentTieringConfiguration" if method != "GET" else (
        "GetIntelligentTieringConfiguration")
    self._authenticate_and_authorize_s3_action(bucket_name=bucket_name)
    configs = _tiering_configs(self.backend.get_bucket(bucket_name))
    config_id = (querystring.get("id") or [None])[0]
    if method == "PUT":
        if not config_id:
            raise MalformedXML()
        try:
            config = xmltodict.parse(self.body)["IntelligentTieringConfiguration"]
        except Exception:
            raise MalformedXML()
        if config.get("Id") != config_id or not config.get("Tiering"):
            raise MalformedXML()
        config.pop("@xmlns", None)
        configs[config_id] = config
        return 200, {}, ""
    if method == "DELETE":
        if configs.pop(config_id, None) is None:
            raise NoSuchConfiguration()
        return 204, {}, ""
    if config_id:
        if config_id not in configs:
            raise NoSuchConfiguration()
        doc = {"IntelligentTieringConfiguration": {"@xmlns": _TIERING_NS, **configs[config_id]}}
    else:
        listed = [configs[k] for k in sorted(configs)]
        doc = {"ListBucketIntelligentTieringConfigurationsOutput": {
            "@xmlns": _TIERING_NS,
            "IsTruncated": "false",
            **({"IntelligentTieringConfiguration": listed} if listed else {}),
        }}
    return 200, {"Content-Type": "application/xml"}, xmltodict.unparse(doc)


_route_bucket_subresource("intelligent-tiering", _tiering_request)
# ---------------------------------------------------------------- attribute-based access control


class AbacRefusesBucketTagging(S3ClientError):
    # S3 documents the refusal but not its code; InvalidRequest (400) is its code for a request
    # the bucket's state does not allow. The operator does not depend on it.
    code = "InvalidRequest"

    def __init__(self):
        super().__init__(
            "InvalidRequest",
            "PutBucketTagging and DeleteBucketTagging are not allowed on a bucket with "
            "attribute-based access control (ABAC) enabled; use TagResource and UntagResource",
        )


def _abac_status(bucket):
    return getattr(bucket, "abac_status", "Disabled")


def _abac_request(self, bucket_name, method):
    """Get/PutBucketAbac: the status is kept on the bucket and answered as S3 answers it."""
    self.data["Action"] = "PutBucketABAC" if method == "PUT" else "GetBucketABAC"
    self._authenticate_and_authorize_s3_action(bucket_name=bucket_name)
    bucket = self.backend.get_bucket(bucket_name)
    if method == "PUT":
        try:
            status = (xmltodict.parse(self.body)["AbacStatus"] or {}).get("Status")
        except Exception:
            raise MalformedXML()
        if status not in ("Enabled", "Disabled"):
            raise MalformedXML()
        bucket.abac_status = status
        return 200, {}, ""
    doc = {"AbacStatus": {"@xmlns": _TIERING_NS, "Status": _abac_status(bucket)}}
    return 200, {"Content-Type": "application/xml"}, xmltodict.unparse(doc)


def _refuse_tagging_under_abac(self, bucket_name):
    """Authorized first (DeleteBucketTagging is s3:PutBucketTagging too), then refused."""
    self.data["Action"] = "PutBucketTagging"
    self._authenticate_and_authorize_s3_action(bucket_name=bucket_name)
    if _abac_status(self.backend.get_bucket(bucket_name)) == "Enabled":
        raise AbacRefusesBucketTagging()


_abac_get = S3Response._bucket_response_get
_abac_put = S3Response._bucket_response_put
_abac_delete = S3Response._bucket_response_delete


def _bucket_get_with_abac(self, bucket_name, querystring):
    if "abac" in querystring:
        return _abac_request(self, bucket_name, "GET")
    return _abac_get(self, bucket_name, querystring)


def _bucket_put_with_abac(self, request, bucket_name, querystring):
    if "abac" in querystring:
        return _abac_request(self, bucket_name, "PUT")
    if "tagging" in querystring:
        _refuse_tagging_under_abac(self, bucket_name)
    return _abac_put(self, request, bucket_name, querystring)


def _bucket_delete_with_abac(self, bucket_name, querystring):
    if "tagging" in querystring:
        _refuse_tagging_under_abac(self, bucket_name)
    return _abac_delete(self, bucket_name, querystring)


S3Response._bucket_response_get = _bucket_get_with_abac
S3Response._bucket_response_put = _bucket_put_with_abac
S3Response._bucket_response_delete = _bucket_delete_with_abac

# ---------------------------------------------------------------- bucket replication

# The members of each element of a replication configuration in the order of S3's API reference,
# the order GetBucketReplication answers them in; members it does not list follow in the order
# they were given.
_REPLICATION_ORDER = {
    "ReplicationConfiguration": ("Role", "Rule"),
    "Rule": ("ID", "Priority", "Prefix", "Filter", "Status", "SourceSelectionCriteria",
             "ExistingObjectReplication", "Destination", "DeleteMarkerReplication"),
    "Filter": ("Prefix", "Tag", "And"),
    "And": ("Prefix", "Tag"),
    "Tag": ("Key", "Value"),
    "SourceSelectionCriteria": ("SseKmsEncryptedObjects", "ReplicaModifications"),
    "Destination": ("Bucket", "Account", "StorageClass", "AccessControlTranslation",
                    "EncryptionConfiguration", "ReplicationTime", "Metrics"),
    "ReplicationTime": ("Status", "Time"),
    "Metrics": ("Status", "EventThreshold"),
}
_BUCKET_ARN = re.compile(r"arn:[^:]+:s3:::([^/:]+)")
_S3_GUIDE = "Please refer to S3 Developer Guide for more information."


class ReplicationRefused(S3ClientError):
    """PutBucketReplication's InvalidRequest (400), with S3's message."""

    code = "InvalidRequest"

    def __init__(self, message):
        super().__init__("InvalidRequest", message)


def _replication_of_body(body):
    """The ReplicationConfiguration document as sent (rules and tags as lists), without its
    namespace. MalformedXML, as S3, for one without a Role or a rule, or with a rule without
    Status or Destination/Bucket, or with both or neither of the legacy Prefix and a Filter."""
    try:
        config = xmltodict.parse(body, force_list=("Rule", "Tag"))["ReplicationConfiguration"]
    except Exception:
        raise MalformedXML()
    if not isinstance(config, dict):
        raise MalformedXML()
    config = {k: v for k, v in config.items() if not k.startswith("@")}

    def well_formed(rule):
        if not isinstance(rule, dict) or rule.get("Status") not in ("Enabled", "Disabled"):
            return False
        destination = rule.get("Destination")
        if not isinstance(destination, dict) or not destination.get("Bucket"):
            return False
        if rule.get("Priority") is not None and not re.fullmatch(r"-?\d+", rule["Priority"]):
            return False
        return ("Prefix" in rule) != ("Filter" in rule)

    rules = config.get("Rule")
    if not config.get("Role") or not rules or not all(map(well_formed, rules)):
        raise MalformedXML()
    return config


def _filter_tags(rule_filter):
    """The tags a V2 rule's Filter selects objects by (its Tag, or those of its And)."""
    if not isinstance(rule_filter, dict):
        return []
    conjunction = rule_filter.get("And")
    return list(rule_filter.get("Tag") or []) + list(
        (conjunction.get("Tag") or []) if isinstance(conjunction, dict) else [])


def _status_of(element):
    return element.get("Status") if isinstance(element, dict) else None


def _bucket_of_any_account(name):
    """The emulator's bucket of that name, whichever account owns it, else None."""
    owner = s3_backends.bucket_accounts.get(name)
    if owner is None:
        return None
    partition, account = owner
    return s3_backends[account][partition].buckets.get(name)


def _check_replication(config):
    """S3's checks of a replication configuration, in this order (S3 does not document its own):
    rule IDs, the V2 schema's rules (a Filter in any rule), SSE-KMS selection and replica keys,
    then destinations."""
    rules = config["Rule"]
    ids = set()
    for rule in rules:
        rule_id = rule.get("ID")
        if rule_id:
            if rule_id in ids:
                raise InvalidArgumentError("Rule Id must be unique.", "ID", rule_id)
            ids.add(rule_id)
    if any("Filter" in rule for rule in rules):
        priorities = set()
        for rule in rules:
            if "DeleteMarkerReplication" not in rule:
                raise ReplicationRefused(
                    "DeleteMarkerReplication must be specified for this version of Cross Region"
                    f" Replication configuration schema. {_S3_GUIDE}")
            if rule.get("Priority") is not None:
                priority = int(rule["Priority"])
                if priority in priorities:
                    raise ReplicationRefused(f"Found duplicate priority {priority}.")
                priorities.add(priority)
            if (_filter_tags(rule.get("Filter"))
                    and _status_of(rule["DeleteMarkerReplication"]) == "Enabled"):
                raise ReplicationRefused("Delete marker replication is not supported if any Tag"
                                         f" filter is specified. {_S3_GUIDE}")
    for rule in rules:
        criteria = rule.get("SourceSelectionCriteria")
        selects_kms = isinstance(criteria, dict) and "SseKmsEncryptedObjects" in criteria
        destination = rule["Destination"]
        encryption = destination.get("EncryptionConfiguration")
        if "EncryptionConfiguration" in destination and not selects_kms:
            raise ReplicationRefused(
                "SseKmsEncryptedObjects must be specified if EncryptionConfiguration is present.")
        if selects_kms and not (isinstance(encryption, dict) and encryption.get("ReplicaKmsKeyID")):
            raise ReplicationRefused(
                "ReplicaKmsKeyID must be specified if SseKmsEncryptedObjects tag is present.")
    for rule in rules:
        arn = rule["Destination"]["Bucket"]
        found = _BUCKET_ARN.fullmatch(arn)
        if not found:
            raise InvalidArgumentError("Invalid bucket ARN.", "Bucket", arn)
        target = _bucket_of_any_account(found.group(1))
        if target is None:
            raise ReplicationRefused("Destination bucket must exist.")
        if not target.is_versioned:
            raise ReplicationRefused("Destination bucket must have versioning enabled.")


def _in_s3_order(name, value):
    """`value`, the element `name` as stored, with its members in S3's order (recursively)."""
    if isinstance(value, list):
        return [_in_s3_order(name, item) for item in value]
    if not isinstance(value, dict):
        return value
    order = _REPLICATION_ORDER.get(name, ())
    keys = [k for k in order if k in value] + [k for k in value if k not in order]
    return {k: _in_s3_order(k, value[k]) for k in keys}


def _rule_id():
    """An ID as S3 gives a rule sent without one (base64 of a random UUID)."""
    return base64.b64encode(str(uuid.uuid4()).encode()).decode().rstrip("=")


def _replication_request(self, bucket_name, querystring, method):
    """Get/Put/DeleteBucketReplication as S3 has them: authorized as
    s3:Get/PutReplicationConfiguration (and PutBucketReplication as iam:PassRole on its Role),
    checked as S3 checks it, and kept as it was sent, to be answered as S3 answers it."""
    self._set_action("BUCKET", method, querystring)
    self._authenticate_and_authorize_s3_action(bucket_name=bucket_name)
    bucket = self.backend.get_bucket(bucket_name)
    if method == "GET":
        config = getattr(bucket, "replication", None)
        if not config:
            raise ReplicationConfigurationNotFoundError(bucket_name=bucket_name)
        doc = {"ReplicationConfiguration": {
            "@xmlns": _TIERING_NS, **_in_s3_order("ReplicationConfiguration", config)}}
        return 200, {"Content-Type": "application/xml"}, xmltodict.unparse(doc)
    if method == "DELETE":
        bucket.replication = None
        return 204, {}, ""
    config = _replication_of_body(self.body)
    # S3 passes the role to itself on the caller's behalf: the caller needs iam:PassRole on it.
    _authorize_also(self, "iam:PassRole", config["Role"], access_control.S3IAMRequest)
    if not bucket.is_versioned:
        raise VersioningNotEnabledForReplication(bucket_name=bucket_name)
    _check_replication(config)
    for rule in config["Rule"]:
        if not rule.get("ID"):
            rule["ID"] = _rule_id()
    bucket.replication = config
    return 200, {}, ""


_route_bucket_subresource("replication", _replication_request)

# ---------------------------------------------------------------- EventBridge notifications

_get_bucket_notification = S3Response.get_bucket_notification


def _get_bucket_notification_as_s3(self):
    status, headers, body = _get_bucket_notification(self)
    text = body.decode() if isinstance(body, bytes) else body
    # S3's root element; moto names an empty answer after the operation.
    text = text.replace("GetBucketNotificationResponse", "NotificationConfiguration")
    bucket = self.backend.buckets.get(self.bucket_name)
    config = bucket.notification_configuration if bucket is not None else None
    if config is not None and config.event_bridge is not None:
        # Either `<NotificationConfiguration .../>` (nothing else configured) or a closing tag.
        text = re.sub(
            r"<NotificationConfiguration([^>]*)/>",
            r"<NotificationConfiguration\1></NotificationConfiguration>",
            text,
        )
        text = text.replace(
            "</NotificationConfiguration>",
            "<EventBridgeConfiguration></EventBridgeConfiguration></NotificationConfiguration>",
        )
    return status, headers, text.encode() if isinstance(body, bytes) else text


S3Response.get_bucket_notification = _get_bucket_notification_as_s3

# ---------------------------------------------------------------- notification destinations

_put_notification_configuration = S3Backend.put_bucket_notification_configuration


class UnableToValidateDestination(S3ClientError):
    code = "InvalidArgument"

    def __init__(self, arn):
        super().__init__(
            "InvalidArgument",
            f"Unable to validate the following destination configurations: {arn} does not exist",
        )


def _destination_exists(arn):
    _, _, service, region, account, name = arn.split(":", 5)
    if service == "sqs":
        return name in sqs_backends[account][region].queues
    if service == "sns":
        return arn in sns_backends[account][region].topics
    return True  # Lambda: not checked


def _put_notification_configuration_checked(self, bucket_name, notification_config):
    for kind, key in (("QueueConfiguration", "Queue"), ("TopicConfiguration", "Topic")):
        for target in (notification_config or {}).get(kind) or []:
            if not _destination_exists(target[key]):
                raise UnableToValidateDestination(target[key])
    return _put_notification_configuration(self, bucket_name, notification_config)


S3Backend.put_bucket_notification_configuration = _put_notification_configuration_checked

# ---------------------------------------------------------------- server access logging

LOGGING_SERVICE = "logging.s3.amazonaws.com"


def _as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _grants_log_delivery(statement, source, target, prefix):
    """Does this target-policy statement let the logging service deliver `source`'s logs?"""
    if statement.get("Effect") != "Allow":
        return False
    principal = statement.get("Principal")
    services = _as_list(principal.get("Service")) if isinstance(principal, dict) else []
    if LOGGING_SERVICE not in services:
        return False
    if not any(fnmatch.fnmatchcase("s3:PutObject", a) for a in _as_list(statement.get("Action"))):
        return False
    key = f"arn:{target.partition}:s3:::{target.name}/{prefix or ''}2024-01-01-00-00-00-LOG"
    if not any(fnmatch.fnmatchcase(key, r) for r in _as_list(statement.get("Resource"))):
        return False
    context = {
        "aws:SourceArn": f"arn:{source.partition}:s3:::{source.name}",
        "aws:SourceAccount": source.account_id,
    }
    return condition_holds(statement.get("Condition"), context)


def _log_permissions_by_policy(self, target_bucket, target_prefix):
    if not target_bucket.policy:
        return False
    policy = json.loads(target_bucket.policy.decode())
    return any(
        _grants_log_delivery(st, self, target_bucket, target_prefix)
        for st in _as_list(policy.get("Statement"))
    )


_log_permissions_by_acl = FakeBucket._log_permissions_enabled_acl


def _log_permissions_by_acl_unless_disabled(target_bucket):
    if "BucketOwnerEnforced" in str(target_bucket.ownership_rule or ""):
        return False
    return _log_permissions_by_acl(target_bucket)


# The policy check becomes a method: it needs the source bucket, `self`.
FakeBucket._log_permissions_enabled_policy = _log_permissions_by_policy
FakeBucket._log_permissions_enabled_acl = staticmethod(_log_permissions_by_acl_unless_disabled)

# ---------------------------------------------------------------- web identity (IRSA)

OIDC_CA_BUNDLE = os.environ.get("S3OP_OIDC_CA_BUNDLE")


def _b64url(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _invalid_token(message):
    return STSClientError("InvalidIdentityToken", message)


def _issuer_keys(issuer):
    """The issuer's signing keys, found as STS finds them: its OpenID discovery document, then
    the document's jwks_uri. Fetched per call: the issuer may rotate its keys at any time."""
    context = ssl.create_default_context(cafile=OIDC_CA_BUNDLE)
    try:
        with urllib.request.urlopen(f"{issuer}/.well-known/openid-configuration", timeout=5,
                                    context=context) as r:
            jwks_uri = json.load(r)["jwks_uri"]
        with urllib.request.urlopen(jwks_uri, timeout=5, context=context) as r:
            return json.load(r)["keys"]
    except Exception as e:
        raise STSClientError("IDPCommunicationError", f"cannot read the keys of {issuer}: {e}")


def _signature_holds(token, keys):
    head, payload, signature = token.split(".")
    header = json.loads(_b64url(head))
    if header.get("alg") != "RS256":
        return False
    for key in keys:
        if key.get("kty") != "RSA" or key.get("kid", header.get("kid")) != header.get("kid"):
            continue
        n, e = (int.from_bytes(_b64url(key[k]), "big") for k in ("n", "e"))
        try:
            RSAPublicNumbers(e, n).public_key().verify(
                _b64url(signature), f"{head}.{payload}".encode(), PKCS1v15(), SHA256())
            return True
        except InvalidSignature:
            continue
    return False


def verify_web_identity(iam, role_arn, token):
    """What STS checks before AssumeRoleWithWebIdentity: an IAM OIDC provider for the token's
    issuer, an audience that provider lists, the issuer's signature, the expiry, and a trust
    policy statement of the role that names the provider and whose conditions hold for the
    token's `sub` and `aud`. Returns the claims, or raises STS's error for the first that fails."""
    try:
        claims = json.loads(_b64url(token.split(".")[1]))
        issuer = claims["iss"]
    except Exception:
        raise _invalid_token("the token is not a JWT with an issuer")
    host_path = issuer.removeprefix("https://")
    provider = next((p for p in iam.open_id_providers.values() if p.url == host_path), None)
    if provider is None:
        raise _invalid_token(f"No OpenIDConnect provider found in your account for {issuer}")
    audiences = _as_list(claims.get("aud"))
    if not any(a in provider.client_id_list for a in audiences):
        raise _invalid_token("Incorrect token audience")
    if not _signature_holds(token, _issuer_keys(issuer)):
        raise _invalid_token("the token's signature does not match the issuer's keys")
    if time.time() >= claims.get("exp", 0):
        raise STSClientError("ExpiredTokenException", "Token expired: the token's exp has passed")
    context = {f"{host_path}:sub": claims.get("sub", ""), f"{host_path}:aud": audiences[0]}
    try:
        trust = json.loads(iam.get_role_by_arn(role_arn).assume_role_policy_document)
    except Exception:
        trust = {}
    for st in _as_list(trust.get("Statement")):
        if (st.get("Effect") == "Allow"
                and "sts:AssumeRoleWithWebIdentity" in _as_list(st.get("Action"))
                and provider.arn in _as_list((st.get("Principal") or {}).get("Federated"))
                and condition_holds(st.get("Condition", {}), context)):
            return claims
    raise STSClientError("AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")


_assume_with_web_identity = TokenResponse.assume_role_with_web_identity
_assume_role = TokenResponse.assume_role


def _assume_role_keeping_tags(self):
    """The session keeps AssumeRole's `Tags`: its requests' aws:PrincipalTag/<key>."""
    answer = _assume_role(self)
    tags = _session_tags_of(self.querystring)
    if tags:
        answer.result["Credentials"].session_tags = tags
    return answer


def _assume_with_verified_web_identity(self):
    # The provider and the role are the role's account's (the call is unsigned: no caller's).
    role_account = (self._get_param("RoleArn") or "").split(":")
    account = role_account[4] if len(role_account) > 4 and role_account[4] else self.current_account
    iam = iam_backends[account][self.partition]
    verify_web_identity(iam, self._get_param("RoleArn"), self._get_param("WebIdentityToken") or "")
    return _assume_with_web_identity(self)


_authenticate = TokenResponse._authenticate_and_authorize_normal_action


def _authenticate_unless_web_identity(self, resource="*"):
    # AssumeRoleWithWebIdentity is unsigned: the token is the caller's proof.
    if self._get_action() != "AssumeRoleWithWebIdentity":
        _authenticate(self, resource)


TokenResponse.assume_role_with_web_identity = _assume_with_verified_web_identity
TokenResponse.assume_role = _assume_role_keeping_tags
TokenResponse._authenticate_and_authorize_normal_action = _authenticate_unless_web_identity

# ---------------------------------------------------------------- CloudTrail management events

CLOUDTRAIL_DETAIL_TYPE = "AWS API Call via CloudTrail"
_SCOPE = re.compile(r"Credential=[^/]+/[^/]+/([^/]+)/([^/]+)/")
# S3 bucket subresources whose PUT/DELETE CloudTrail names other than Put/DeleteBucket<Name>.
_S3_EVENT_NAMES = {
    "object-lock": "PutObjectLockConfiguration",
    "notification": "PutBucketNotification",
    "accelerate": "PutBucketAccelerateConfiguration",
    "intelligent-tiering": "PutBucketIntelligentTieringConfiguration",
}
_IAM_READ_PREFIXES = ("Get", "List", "Generate", "Simulate")


def _s3_event_name(method, operation):
    """CloudTrail's eventName of a bucket-level S3 write, else None (reads and object-level data
    events are not management events)."""
    if method not in ("PUT", "DELETE") or not operation.startswith(f"{method} bucket"):
        return None
    sub = operation.partition("?")[2].split("&")[0]
    verb = "Put" if method == "PUT" else "Delete"
    if not sub:
        return "CreateBucket" if method == "PUT" else "DeleteBucket"
    if method == "PUT" and sub in _S3_EVENT_NAMES:
        return _S3_EVENT_NAMES[sub]
    return verb + "Bucket" + sub[0].upper() + sub[1:]


def _user_identity(account, key_id):
    """CloudTrail's userIdentity of the caller signing with `key_id`."""
    iam = iam_backends[account][get_partition("us-east-1")]
    # Copies: the server is threaded, and another request may add a user, key or session while
    # this one is looked up (iterating the live dict then raised, and the event was lost).
    for user in list(iam.users.values()):
        if any(k.access_key_id == key_id for k in list(user.access_keys)):
            return {"type": "IAMUser", "arn": user.arn, "accountId": account,
                    "accessKeyId": key_id, "userName": user.name}
    for role in list(sts_backends[account]["aws"].assumed_roles):
        if role.access_key_id == key_id:
            return {"type": "AssumedRole", "arn": role.arn, "accountId": account,
                    "accessKeyId": key_id,
                    "sessionContext": {"sessionIssuer": {"type": "Role", "arn": role.role_arn}}}
    return {"type": "Unknown", "accountId": account, "accessKeyId": key_id}


def cloudtrail_event(environ, form, operation, key_id, error=None):
    """(account, region, EventBridge entry) of the CloudTrail management event AWS records for this
    request, or None: S3 bucket-level writes and IAM writes, in CloudTrail's record shape. A
    refused request is recorded too, as CloudTrail does, with its `error` (code, message) in
    `errorCode` and `errorMessage`."""
    scope = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    if not scope:
        return None
    region, service = scope.groups()
    method = environ.get("REQUEST_METHOD", "")
    if service == "s3":
        name = _s3_event_name(method, operation)
        bucket = environ.get("PATH_INFO", "").strip("/").split("/")[0]
        params = {"bucketName": bucket}
        resources = [{"type": "AWS::S3::Bucket", "ARN": f"arn:aws:s3:::{bucket}"}]
    elif service == "iam":
        name = operation if not operation.startswith(_IAM_READ_PREFIXES) else None
        # IAM is global: CloudTrail records its events in us-east-1.
        region = "us-east-1"
        params = {k[0].lower() + k[1:]: v[0] for k, v in form.items()
                  if k not in ("Action", "Version") and not k.endswith("Document")}
        resources = []
    else:
        return None
    if not name:
        return None
    # The account of the signing key (an IAM user's or a role session's), whose trail it is.
    account = get_account_id_from(key_id)
    detail = {
        "eventVersion": "1.09",
        "userIdentity": _user_identity(account, key_id),
        "eventTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "eventSource": f"{service}.amazonaws.com",
        "eventName": name,
        "awsRegion": region,
        "sourceIPAddress": environ.get("REMOTE_ADDR", ""),
        "userAgent": environ.get("HTTP_USER_AGENT", ""),
        "requestParameters": params,
        "responseElements": None,
        "eventID": str(uuid.uuid4()),
        "readOnly": False,
        "resources": resources,
        "eventType": "AwsApiCall",
        "managementEvent": True,
        "recipientAccountId": account,
        "eventCategory": "Management",
    }
    if error:
        detail["errorCode"], detail["errorMessage"] = error
    entry = {"Source": f"aws.{service}", "DetailType": CLOUDTRAIL_DETAIL_TYPE,
             "Detail": json.dumps(detail)}
    return account, region, entry


_ERROR_CODE = re.compile(rb"<Code>([^<]+)</Code>")
_ERROR_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")


def error_of(body):
    """(code, message) of an S3 or IAM error answer."""
    code, message = _ERROR_CODE.search(body), _ERROR_MESSAGE.search(body)
    return (code.group(1).decode() if code else "Client.Error",
            message.group(1).decode() if message else "")


def deliver_to_eventbridge(account, region, entry):
    """Onto the account's default event bus of `region`, whose rules send it on (SQS)."""
    events_backends[account][region].put_events([entry])


# ---------------------------------------------------------------- EventBridge across accounts


def _statements_allow(docs, action, resource, context, principal_ok=None):
    """IAM's verdict of `docs` (policy documents) on `action` on `resource`: an explicit Deny
    wins, else an Allow whose Action, Resource, Principal (`principal_ok`, for a resource
    policy) and Condition hold."""
    allowed = False
    for doc in docs:
        for st in _as_list(doc.get("Statement")):
            if not any(_iam_like(a, action, True) for a in _as_list(st.get("Action"))):
                continue
            if "Resource" in st and not any(_iam_like(r, resource)
                                            for r in _as_list(st.get("Resource"))):
                continue
            if principal_ok is not None and not principal_ok(st.get("Principal")):
                continue
            if not condition_holds(st.get("Condition", {}), context):
                continue
            if st.get("Effect") == "Deny":
                return False
            allowed = allowed or st.get("Effect") == "Allow"
    return allowed


def forwarding_refusal(rule, target, event):
    """Why EventBridge would not deliver `event` from `rule` to the event bus of another account
    that `target` names, else None: the target's role (when it has one; AWS recommends one)
    must exist in the rule's account, trust events.amazonaws.com for this rule (`aws:SourceArn`,
    `aws:SourceAccount`) and be allowed events:PutEvents on the bus; the bus's resource policy
    must allow the rule's account (or that role) events:PutEvents with its conditions holding
    (`aws:SourceArn` the rule, `aws:SourceAccount`, `events:source`, `events:detail-type`)."""
    bus_arn = target["Arn"]
    account, region, bus_name = bus_arn.split(":")[4], bus_arn.split(":")[3], bus_arn.split("/", 1)[1]
    context = {"aws:SourceArn": rule.arn, "aws:SourceAccount": rule.account_id,
               "aws:PrincipalAccount": rule.account_id,
               "events:source": [event.get("source")], "events:detail-type": [event.get("detail-type")]}
    partition = get_partition(rule.region_name)
    role_arn = target.get("RoleArn")
    if role_arn:
        role = _role_of_arn(role_arn, partition)
        if role is None or role_arn.split(":")[4] != rule.account_id:
            return f"the target's role {role_arn} is not a role of account {rule.account_id}"
        trust = json.loads(role.assume_role_policy_document or "{}")
        service = lambda p: "events.amazonaws.com" in _as_list((p or {}).get("Service"))
        if not _statements_allow([trust], "sts:AssumeRole", "*", context, service):
            return f"the role {role_arn} does not trust events.amazonaws.com for {rule.arn}"
        docs = [json.loads(d) if isinstance(d, str) else d for d in role.policies.values()]
        docs += [json.loads(v.document) for m in role.managed_policies.values()
                 for v in m.versions if v.version_id == m.default_version_id]
        if not _statements_allow(docs, "events:PutEvents", bus_arn, {}):
            return f"the role {role_arn} is not allowed events:PutEvents on {bus_arn}"
    try:
        bus = events_backends[account][region].describe_event_bus(bus_name)
    except Exception:
        return f"no event bus {bus_arn}"
    root = f"arn:{partition}:iam::{rule.account_id}:root"
    callers = {root, rule.account_id, "*"} | ({role_arn} if role_arn else set())

    def names_caller(principal):
        if principal == "*":
            return True
        return any(p in callers for p in _as_list((principal or {}).get("AWS")))

    policy = json.loads(bus.policy or "{}")
    if not _statements_allow([policy], "events:PutEvents", bus_arn, context, names_caller):
        return f"the policy of {bus_arn} does not allow {rule.arn} to put this event"
    return None


_stock_send_to_targets = EventsRule.send_to_targets


def _send_to_targets_across_accounts(self, original_event, transform_input=True):
    """Stock moto, but an event bus of another account as a target is checked as EventBridge
    checks it (`forwarding_refusal`; a refused event is dropped, as AWS counts it in
    FailedInvocations) and receives the event as it was: its `account`, `region`, `id` and
    `time` are the source's (stock moto rewrote them to the receiving account's)."""
    elsewhere = [t for t in self.targets if _other_accounts_bus(self, t["Arn"])]
    if not elsewhere:
        return _stock_send_to_targets(self, original_event, transform_input)
    if not self.event_pattern.matches_event(original_event):
        return None
    pristine = copy.deepcopy(original_event)
    here = copy.copy(self)
    here.targets = [t for t in self.targets if t not in elsewhere]
    _stock_send_to_targets(here, original_event, transform_input)
    for target in elsewhere:
        why = forwarding_refusal(self, target, pristine)
        if why:
            print(f"moto_server: event not delivered to {target['Arn']}: {why}", file=sys.stderr)
            continue
        arn = target["Arn"]
        account, region, bus_name = arn.split(":")[4], arn.split(":")[3], arn.split("/", 1)[1]
        bus = events_backends[account][region].describe_event_bus(bus_name)
        for rule in list(bus.rules.values()):
            rule.send_to_targets(copy.deepcopy(pristine))
    return None


def _other_accounts_bus(rule, arn):
    parts = arn.split(":")
    return (len(parts) == 6 and parts[2] == "events" and parts[5].startswith("event-bus/")
            and parts[4] != rule.account_id)


EventsRule.send_to_targets = _send_to_targets_across_accounts
# An event as a target receives it carries the account it happened in (stock moto's default
# input template left `account` out).
EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE = (
    '{"id": "<id>", "time": <time>, "version": "0", "detail-type": "<detail-type>", '
    '"source": "<source>", "account": "<account>", "region": "<region>", '
    '"resources": <resources>, "detail": <detail>}')

# ---------------------------------------------------------------- EKS Pod Identity

POD_IDENTITY_AUDIENCE = "pods.eks.amazonaws.com"
# Every cluster of this emulator stands for the environment's own: its OIDC issuer is the
# environment's ServiceAccount issuer, as an EKS cluster's issuer is its API server's.
CLUSTER_ISSUER = os.environ.get("S3OP_SA_ISSUER")
SESSION_POLICY_MAX = 2048  # STS's limit for an inline session policy, which EKS hands on
_ASSOCIATION_PATH = re.compile(r"^/clusters/([^/]+)(?:/pod-identity-associations(?:/([^/?]+))?)?")
_ASSOCIATION_ACTIONS = {"CreatePodIdentityAssociation", "DescribePodIdentityAssociation",
                        "ListPodIdentityAssociations", "UpdatePodIdentityAssociation",
                        "DeletePodIdentityAssociation"}


def _eks_error(code, message, status=400):
    """EKS's REST-JSON error: the code in `__type` (and X-Amzn-ErrorType), the HTTP status EKS
    uses for it."""
    error = JsonRESTError(code, message)
    error.code = status
    return error


_create_cluster = EKSBackend.create_cluster


def _create_cluster_with_issuer(self, *args, **kwargs):
    cluster = _create_cluster(self, *args, **kwargs)
    if CLUSTER_ISSUER:
        cluster.identity = {"oidc": {"issuer": CLUSTER_ISSUER}}
    return cluster


EKSBackend.create_cluster = _create_cluster_with_issuer


def _cluster_arn(response, name):
    return f"arn:{response.partition}:eks:{response.region}:{response.current_account}:cluster/{name}"


def _association_arn(response, cluster, association_id):
    return (f"arn:{response.partition}:eks:{response.region}:{response.current_account}"
            f":podidentityassociation/{cluster}/{association_id}")


def _eks_resource(self):
    """The ARN EKS authorizes a call on: the association for Describe/Update/Delete, else the
    cluster named in the path (stock moto authorizes every EKS call on `*`)."""
    found = _ASSOCIATION_PATH.match(self.path)
    if not found:
        return "*"
    if found.group(2):
        return _association_arn(self, found.group(1), found.group(2))
    return _cluster_arn(self, found.group(1))


EKSResponse._determine_resource = _eks_resource


def _authorize_also(self, action, resource, request_class=None):
    """Authorizes the signed caller of this request for one more action (iam:PassRole), as
    the service does on the caller's behalf. `request_class` decides the refusal's shape
    (S3's AccessDenied with access_control.S3IAMRequest; by default the query protocol's)."""
    if ActionAuthenticatorMixin.request_count < moto_settings.INITIAL_NO_AUTH_ACTION_COUNT:
        return
    request = (request_class or access_control.IAMRequest)(
        account_id=self.current_account, method=self.method, path=self.raw_path, data=self.data,
        body=self.raw_body, headers=self.headers, action=action)
    request._action = action
    request.check_action_permitted(resource)


def _cluster_of(self, name):
    cluster = eks_backends[self.current_account][self.region].clusters.get(name)
    if cluster is None:
        raise _eks_error("ResourceNotFoundException", f"No cluster found for name: {name}.", 404)
    if not hasattr(cluster, "pod_identity_associations"):
        cluster.pod_identity_associations = {}
    return cluster


def _association_of(self, cluster):
    association_id = self._get_param("associationId")
    association = cluster.pod_identity_associations.get(association_id)
    if association is None:
        raise _eks_error("ResourceNotFoundException",
                         f"No Pod Identity Association found for id {association_id}.", 404)
    return association


def _check_policy(policy, disable_session_tags):
    """EKS's rules for the association's session policy: JSON, at most STS's inline session
    policy size, and only with the session tags disabled (both are packed into the session)."""
    if policy is None:
        return
    if len(policy) > SESSION_POLICY_MAX:
        raise _eks_error("InvalidParameterException",
                         f"policy must be at most {SESSION_POLICY_MAX} characters.")
    try:
        json.loads(policy)["Statement"]
    except Exception:
        raise _eks_error("InvalidParameterException", "policy is not a valid IAM policy document.")
    if not disable_session_tags:
        raise _eks_error("InvalidParameterException",
                         "disableSessionTags must be true when a policy is given.")


def _association_answer(association):
    return ActionResult({"association": dict(association)})


def _create_pod_identity_association(self):
    name = self._get_param("name")
    cluster = _cluster_of(self, name)
    namespace, account = self._get_param("namespace"), self._get_param("serviceAccount")
    role_arn = self._get_param("roleArn")
    if not (namespace and account and role_arn):
        raise _eks_error("InvalidParameterException",
                         "namespace, serviceAccount and roleArn are required.")
    policy, disable = self._get_param("policy"), bool(self._get_param("disableSessionTags"))
    _check_policy(policy, disable)
    for existing in list(cluster.pod_identity_associations.values()):
        if (existing["namespace"], existing["serviceAccount"]) == (namespace, account):
            raise _eks_error("ResourceInUseException",
                             f"Association already exists: {existing['associationId']}", 409)
    _authorize_also(self, "iam:PassRole", role_arn)
    association_id = "a-" + "".join(random.choices(string.ascii_lowercase + string.digits, k=17))
    now = utcnow()
    association = {
        "clusterName": name, "namespace": namespace, "serviceAccount": account,
        "roleArn": role_arn, "associationArn": _association_arn(self, name, association_id),
        "associationId": association_id, "tags": self._get_param("tags") or {},
        "createdAt": now, "modifiedAt": now, "disableSessionTags": disable,
    }
    if policy is not None:
        association["policy"] = policy
    cluster.pod_identity_associations[association_id] = association
    return _association_answer(association)


def _describe_pod_identity_association(self):
    cluster = _cluster_of(self, self._get_param("name"))
    return _association_answer(_association_of(self, cluster))


def _list_pod_identity_associations(self):
    cluster = _cluster_of(self, self._get_param("name"))
    namespace, account = self._get_param("namespace"), self._get_param("serviceAccount")
    found = [
        {k: a[k] for k in ("clusterName", "namespace", "serviceAccount", "associationArn",
                           "associationId")}
        for a in cluster.pod_identity_associations.values()
        if namespace in (None, a["namespace"]) and account in (None, a["serviceAccount"])
    ]
    start = int(self._get_param("nextToken") or 0)
    size = int(self._get_param("maxResults") or 100)
    answer = {"associations": found[start:start + size]}
    if start + size < len(found):
        answer["nextToken"] = str(start + size)
    return ActionResult(answer)


def _update_pod_identity_association(self):
    cluster = _cluster_of(self, self._get_param("name"))
    association = _association_of(self, cluster)
    role_arn, policy = self._get_param("roleArn"), self._get_param("policy")
    disable = self._get_param("disableSessionTags")
    disable = association["disableSessionTags"] if disable is None else bool(disable)
    # An empty policy removes it.
    policy = association.get("policy") if policy is None else (policy or None)
    _check_policy(policy, disable)
    if role_arn:
        _authorize_also(self, "iam:PassRole", role_arn)
        association["roleArn"] = role_arn
    association["disableSessionTags"] = disable
    association.pop("policy", None)
    if policy is not None:
        association["policy"] = policy
    association["modifiedAt"] = utcnow()
    return _association_answer(association)


def _delete_pod_identity_association(self):
    cluster = _cluster_of(self, self._get_param("name"))
    association = _association_of(self, cluster)
    del cluster.pod_identity_associations[association["associationId"]]
    return _association_answer(association)


EKSResponse.create_pod_identity_association = _create_pod_identity_association
EKSResponse.describe_pod_identity_association = _describe_pod_identity_association
EKSResponse.list_pod_identity_associations = _list_pod_identity_associations
EKSResponse.update_pod_identity_association = _update_pod_identity_association
EKSResponse.delete_pod_identity_association = _delete_pod_identity_association


def _pod_identity_claims(cluster, token):
    """What EKS Auth checks of a Pod's ServiceAccount token: the cluster's issuer, the Pod
    Identity audience, the issuer's signature, the expiry. Returns the claims."""
    try:
        claims = json.loads(_b64url(token.split(".")[1]))
    except Exception:
        raise _eks_error("InvalidTokenException", "The token is not a JWT.")
    issuer = cluster.identity["oidc"]["issuer"]
    if claims.get("iss") != issuer:
        raise _eks_error("InvalidTokenException", "The token's issuer is not the cluster's.")
    if POD_IDENTITY_AUDIENCE not in _as_list(claims.get("aud")):
        raise _eks_error("InvalidTokenException", f"The token's audience is not {POD_IDENTITY_AUDIENCE}.")
    try:
        keys = _issuer_keys(issuer)
    except STSClientError as e:
        raise _eks_error("InternalServerException", e.message, 500)
    if not _signature_holds(token, keys):
        raise _eks_error("InvalidTokenException", "The token's signature does not match the cluster's keys.")
    if time.time() >= claims.get("exp", 0):
        raise _eks_error("ExpiredTokenException", "The token is expired.")
    return claims


def _session_tags(cluster, claims):
    """The session tags EKS Pod Identity sets (the Pod's only when the token is bound to one)."""
    k8s = claims.get("kubernetes.io") or {}
    pod = k8s.get("pod") or {}
    tags = {
        "eks-cluster-arn": cluster.arn,
        "eks-cluster-name": cluster.name,
        "kubernetes-namespace": k8s.get("namespace", ""),
        "kubernetes-service-account": (k8s.get("serviceaccount") or {}).get("name", ""),
        "kubernetes-pod-name": pod.get("name"),
        "kubernetes-pod-uid": pod.get("uid"),
    }
    return {k: v for k, v in tags.items() if v}


def _trusts_pod_identity(iam, role_arn, context):
    """The role's trust policy lets the Pod Identity service assume it and tag the session."""
    try:
        trust = json.loads(iam.get_role_by_arn(role_arn).assume_role_policy_document)
    except Exception:
        return False
    allowed = set()
    for st in _as_list(trust.get("Statement")):
        services = _as_list((st.get("Principal") or {}).get("Service"))
        if (st.get("Effect") == "Allow" and POD_IDENTITY_AUDIENCE in services
                and condition_holds(st.get("Condition", {}), context)):
            for action in ("sts:AssumeRole", "sts:TagSession"):
                if any(_iam_like(a, action, True) for a in _as_list(st.get("Action"))):
                    allowed.add(action)
    return allowed == {"sts:AssumeRole", "sts:TagSession"}


class EKSAuthResponse(BaseResponse):
    """EKS Auth (signing name eks-auth): AssumeRoleForPodIdentity, the Pod Identity agent's call."""

    def __init__(self):
        super().__init__(service_name="eks-auth")

    def _determine_resource(self):
        return _cluster_arn(self, self.path.split("/")[2])

    def assume_role_for_pod_identity(self):
        name = self.path.split("/")[2]
        cluster = eks_backends[self.current_account][self.region].clusters.get(name)
        if cluster is None:
            raise _eks_error("ResourceNotFoundException", f"No cluster found for name: {name}.", 404)
        body = json.loads(self.body or "{}")
        claims = _pod_identity_claims(cluster, body.get("token") or "")
        k8s = claims.get("kubernetes.io") or {}
        namespace = k8s.get("namespace")
        account = (k8s.get("serviceaccount") or {}).get("name")
        association = next(
            (a for a in getattr(cluster, "pod_identity_associations", {}).values()
             if (a["namespace"], a["serviceAccount"]) == (namespace, account)), None)
        if association is None:
            raise _eks_error("ResourceNotFoundException",
                             f"No Pod Identity Association found for {namespace}/{account}.", 404)
        tags = {} if association["disableSessionTags"] else _session_tags(cluster, claims)
        context = {"aws:SourceAccount": self.current_account, "aws:SourceArn": cluster.arn,
                   **{f"aws:RequestTag/{k}": v for k, v in tags.items()}}
        iam = iam_backends[self.current_account][self.partition]
        if not _trusts_pod_identity(iam, association["roleArn"], context):
            raise _eks_error("AccessDeniedException",
                             f"{POD_IDENTITY_AUDIENCE} is not allowed to assume {association['roleArn']}"
                             " and tag its session.", 400)
        pod = (k8s.get("pod") or {}).get("name") or account
        session = sts_backends[self.current_account][self.partition].assume_role(
            region_name=self.region, role_session_name=f"eks-{name}-{pod}-{uuid.uuid4()}"[:64],
            role_arn=association["roleArn"], policy=association.get("policy"),
            duration=6 * 3600, external_id=None)
        session.session_tags = tags
        return ActionResult({
            "subject": {"namespace": namespace, "serviceAccount": account},
            "audience": POD_IDENTITY_AUDIENCE,
            "podIdentityAssociation": {k: association[k] for k in ("associationArn", "associationId")},
            "assumedRoleUser": {"arn": session.arn, "assumeRoleId": session.user_id},
            "credentials": {"accessKeyId": session.access_key_id,
                            "secretAccessKey": session.secret_access_key,
                            "sessionToken": session.session_token,
                            "expiration": session.expiration},
        })


_eks_urls.url_paths.update({
    "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations/(?P<associationId>[^/]+)$":
        EKSResponse.dispatch,
    "{0}/clusters/(?P<clusterName>[^/]+)/assume-role-for-pod-identity$": EKSAuthResponse.dispatch,
})
# Requests signed for eks-auth reach the EKS application, which routes them by path.
backend_index.backend_url_patterns.insert(
    0, ("eks", re.compile(r"https?://eks-auth\.(.+)\.amazonaws\.com")))

_signed_request = access_control.IAMRequestBase._create_aws_request


def _signed_request_with_its_body(self):
    # Stock moto signs a bodiless request's query parameters, or its headers, as a form body, so
    # every signed EKS GET (Describe, List) failed with SignatureDoesNotMatch.
    request = _signed_request(self)
    if self._service in ("eks", "eks-auth"):
        request.data = self._body or b""
    return request


access_control.IAMRequestBase._create_aws_request = _signed_request_with_its_body

_access_denied = access_control.IAMRequest._raise_access_denied


def _access_denied_for_eks(self):
    # EKS and EKS Auth speak REST-JSON: the SDKs read the code from `__type`, not from XML.
    if self._service in ("eks", "eks-auth"):
        status = 403 if self._service == "eks" else 400
        raise _eks_error("AccessDeniedException",
                         f"User: {self._access_key.arn} is not authorized to perform: {self._action}",
                         status)
    _access_denied(self)


access_control.IAMRequest._raise_access_denied = _access_denied_for_eks

# ---------------------------------------------------------------- request log

REQUESTS_PATH = "/__s3op/requests"
S3_SUBRESOURCE_PARAMS = {"list-type", "uploadId", "partNumber", "versionId"}
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def access_key_of(environ, query):
    """The access key id a request is signed with (header or presigned URL), or "anonymous"."""
    found = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if found:
        return found.group(1)
    credential = (query.get("X-Amz-Credential") or [""])[0]
    return credential.split("/", 1)[0] or "anonymous"


def operation_of(method, path, query_string, form):
    """hack/fault_proxy.py's name for a request: the query protocol's Action, else S3's
    `METHOD service|bucket|object[?subresources]`."""
    if form.get("Action"):
        return form["Action"][0]
    depth = len([s for s in path.split("/", 2)[1:] if s])
    level = ("service", "bucket", "object")[depth]
    params = parse_qsl(query_string, keep_blank_values=True)
    subs = sorted({k for k, v in params if v == "" or k in S3_SUBRESOURCE_PARAMS})
    return f"{method} {level}" + (f"?{'&'.join(subs)}" if subs else "")


EXPECTED_OWNER_HEADER = "HTTP_X_AMZ_EXPECTED_BUCKET_OWNER"


def expected_owner_refusal(environ):
    """S3's answer to a request whose `x-amz-expected-bucket-owner` names another account than
    the bucket's owner: 403 AccessDenied, whoever asks (stock moto ignores the header). None
    when the request may go on: no header, not S3, or a bucket that does not exist (S3 then
    answers NoSuchBucket)."""
    expected = environ.get(EXPECTED_OWNER_HEADER)
    scope = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    if expected is None or not scope or scope.group(2) != "s3":
        return None
    bucket = environ.get("PATH_INFO", "").strip("/").split("/")[0]
    owner = s3_backends.bucket_accounts.get(bucket)
    if owner is None or owner[1] == expected:
        return None
    return b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>' \
        b'<Message>Access Denied</Message></Error>'


class RequestLog:
    """WSGI middleware: counts each request, answers REQUESTS_PATH itself, and refuses S3
    requests that expect another bucket owner (see expected_owner_refusal)."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.counts = defaultdict(Counter)

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        query_string = environ.get("QUERY_STRING", "")
        query = parse_qs(query_string, keep_blank_values=True)
        if path == REQUESTS_PATH:
            key = (query.get("key") or [""])[0]
            with self.lock:
                body = json.dumps(dict(self.counts.get(key, {}))).encode()
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        form = {}
        if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
            # Read once and handed on: moto reads the same bytes again.
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length:
                body = environ["wsgi.input"].read(length)
                environ["wsgi.input"] = io.BytesIO(body)
                form = parse_qs(body.decode("utf-8", "replace"))
        operation = operation_of(environ.get("REQUEST_METHOD", ""), path, query_string, form)
        key_id = access_key_of(environ, query)
        with self.lock:
            self.counts[key_id][operation] += 1
        refused = expected_owner_refusal(environ)
        if refused is not None:
            head = environ.get("REQUEST_METHOD") == "HEAD"
            start_response("403 Forbidden", [("Content-Type", "application/xml"),
                                             ("Content-Length", "0" if head else str(len(refused)))])
            return [b"" if head else refused]
        status = []

        def recorded(code, headers, exc_info=None):
            status.append(code)
            return start_response(code, headers, exc_info)

        response = self.app(environ, recorded)
        refused = bool(status) and status[0].startswith("4")
        if status and (status[0].startswith("2") or refused):
            error = None
            if refused:
                # The (small) error answer, read here for CloudTrail's errorCode, handed on.
                body = b"".join(response)
                if hasattr(response, "close"):
                    response.close()
                response, error = [body], error_of(body)
            event = cloudtrail_event(environ, form, operation, key_id, error)
            if event:
                try:
                    deliver_to_eventbridge(*event)
                except Exception as e:  # the request succeeded; only its event is lost
                    print(f"moto_server: CloudTrail event not delivered: {e!r}", file=sys.stderr)
        return response


# ---------------------------------------------------------------- member accounts

ACCOUNTS_VARIABLE = "S3OP_EMULATOR_ACCOUNTS"
MEMBER_ROLE = "OrganizationAccountAccessRole"


def member_accounts(value):
    """The account ids of S3OP_EMULATOR_ACCOUNTS (comma-separated, 12 digits each)."""
    ids = [a.strip() for a in (value or "").split(",") if a.strip()]
    if ids and "MOTO_ACCOUNT_ID" in os.environ:
        raise SystemExit(f"moto_server: {ACCOUNTS_VARIABLE} needs MOTO_ACCOUNT_ID unset "
                         "(it puts every request in one account)")
    for account in ids:
        if not re.fullmatch(r"\d{12}", account) or account == DEFAULT_ACCOUNT_ID:
            raise SystemExit(f"moto_server: {ACCOUNTS_VARIABLE}: {account!r} is not a 12-digit "
                             f"account id other than the default account {DEFAULT_ACCOUNT_ID}")
    return ids


def create_member_account(account):
    """What AWS Organizations creates in a new member account: the role
    OrganizationAccountAccessRole, which the management account (here the default account) may
    assume, with full administrator rights in the member account (inline AdministratorAccess)."""
    iam = iam_backends[account][get_partition("us-east-1")]
    trust = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:root"},
        "Action": "sts:AssumeRole"}]}
    admin = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.create_role(role_name=MEMBER_ROLE, assume_role_policy_document=json.dumps(trust), path="/",
                    permissions_boundary=None, description="", tags=[], max_session_duration=None)
    iam.put_role_policy(MEMBER_ROLE, "AdministratorAccess", json.dumps(admin))


if __name__ == "__main__":
    # moto.server.main with the request log around moto's application.
    host, port = sys.argv[1], int(sys.argv[2])
    for member in member_accounts(os.environ.get(ACCOUNTS_VARIABLE)):
        create_member_account(member)
    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True  # as moto.server.main sets it
    run_simple(host, port, RequestLog(app), threaded=True, request_handler=MotoRequestHandler)
