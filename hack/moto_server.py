"""Starts moto's server with IAM enforcement that evaluates real IAM resource ARNs.

Stock moto authorizes IAM actions against the resource "*" unless a role of that name already
exists, so a policy scoped to an IAM path (as the operator's own policy is) would be denied every
user action. AWS evaluates `arn:aws:iam::<account>:user/<path>/<name>`; this launcher makes moto
do the same for users and roles, existing or about to be created, so the tests enforce the
operator's shipped policy exactly.

Bulk DeleteObjects is authorized like AWS does it, as s3:DeleteObject on the objects
(`arn:aws:s3:::<bucket>/*`); stock moto checks the bucket ARN and then refuses every key.

It also fixes one wire-format bug: moto names the root element of a GetBucketVersioning answer
`GetBucketVersioningResponse`, where S3 (and every strict SDK parser) uses `VersioningConfiguration`.
Everything else is stock moto.

Usage: python moto_server.py HOST PORT  (run with the moto virtualenv's python)
"""

import sys

from moto.iam.responses import IamResponse
from moto.s3.responses import ACTION_MAP, S3Response
from moto.server import main


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

_get_bucket_versioning = S3Response.get_bucket_versioning


def _get_bucket_versioning_as_s3(self):
    status, headers, body = _get_bucket_versioning(self)
    if isinstance(body, bytes):
        body = body.replace(b"GetBucketVersioningResponse", b"VersioningConfiguration")
    else:
        body = body.replace("GetBucketVersioningResponse", "VersioningConfiguration")
    return status, headers, body


S3Response.get_bucket_versioning = _get_bucket_versioning_as_s3

_authorize_s3 = S3Response._authenticate_and_authorize_s3_action


def _authorize_bulk_delete_on_objects(self, bucket_name=None, key_name=None):
    if key_name is None and bucket_name and self.data.get("Action") == "DeleteObject":
        key_name = "*"
    return _authorize_s3(self, bucket_name=bucket_name, key_name=key_name)


S3Response._authenticate_and_authorize_s3_action = _authorize_bulk_delete_on_objects

if __name__ == "__main__":
    host, port = sys.argv[1], sys.argv[2]
    main(["-H", host, "-p", port])
