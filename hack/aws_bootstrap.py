"""Creates the test's own admin identity in a fresh moto, then prints it as shell exports.

moto runs with INITIAL_NO_AUTH_ACTION_COUNT=3: exactly these three calls pass unauthenticated,
and every later request must be signed by a key whose policies allow it.
Usage: python aws_bootstrap.py ENDPOINT
"""

import json
import sys

import boto3

endpoint = sys.argv[1]
iam = boto3.client(
    "iam",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="bootstrap",
    aws_secret_access_key="bootstrap",
)
iam.create_user(UserName="s3op-test-admin")
iam.put_user_policy(
    UserName="s3op-test-admin",
    PolicyName="admin",
    PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    ),
)
key = iam.create_access_key(UserName="s3op-test-admin")["AccessKey"]
print(f"export S3OP_AWS_ADMIN_ACCESS_KEY_ID={key['AccessKeyId']}")
print(f"export S3OP_AWS_ADMIN_SECRET_ACCESS_KEY={key['SecretAccessKey']}")
