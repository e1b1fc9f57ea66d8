#!/usr/bin/env bash
# Runs the operator locally against a local control plane (etcd, kube-apiserver,
# kube-controller-manager) and moto, applies the samples and proves the delivered credentials
# work. Everything stays up afterwards; the end of the output says how to use and stop it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source hack/lib.sh

log "building or reusing the tools (etcd, kube-apiserver, kubectl, moto)"
hack/tools.sh etcd kube moto

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$S3OP_CACHE/target}"
log "cargo build (target dir $CARGO_TARGET_DIR)"
cargo build --locked
operator_bin="$CARGO_TARGET_DIR/debug/s3-operator"

log "starting the local environment (kept running)"
envfile="$(hack/env.sh up | tail -n 1)"
# shellcheck source=/dev/null
source "$envfile"
py="$S3OP_CACHE/venv-moto-$MOTO_VERSION/bin/python"

log "installing the CRDs"
kubectl apply --server-side -f config/crd/bases/
kubectl wait --for=condition=Established crd --all --timeout=60s

log "creating the permissions boundary (config/iam/boundary-policy.json) and the IAM user s3-operator (config/iam/operator-policy.json)"
# Prints "ACCESS_KEY_ID SECRET"; captured, never shown.
op_creds="$("$py" - "$S3OP_AWS_ENDPOINT" "$S3OP_AWS_REGION" config/iam/operator-policy.json config/iam/boundary-policy.json <<'EOF'
import json, os, sys

import boto3

endpoint, region, policy_file, boundary_file = sys.argv[1:5]
iam = boto3.client(
    "iam",
    endpoint_url=endpoint,
    region_name=region,
    aws_access_key_id=os.environ["S3OP_AWS_ADMIN_ACCESS_KEY_ID"],
    aws_secret_access_key=os.environ["S3OP_AWS_ADMIN_SECRET_ACCESS_KEY"],
)
# Every user and role the operator creates carries this boundary (cluster "default").
with open(boundary_file) as f:
    boundary = json.dumps(json.load(f))
try:
    iam.create_policy(PolicyName="s3-operator-boundary", Path="/s3-operator/default/", PolicyDocument=boundary)
except iam.exceptions.EntityAlreadyExistsException:
    pass
user = "s3-operator"
try:
    iam.get_user(UserName=user)
    print(f"IAM user {user} exists; replacing its access keys", file=sys.stderr)
except iam.exceptions.NoSuchEntityException:
    iam.create_user(UserName=user)
with open(policy_file) as f:
    document = json.dumps(json.load(f))
# Exactly the shipped policy: nothing more.
iam.put_user_policy(UserName=user, PolicyName="s3-operator", PolicyDocument=document)
for name in iam.list_user_policies(UserName=user)["PolicyNames"]:
    if name != "s3-operator":
        iam.delete_user_policy(UserName=user, PolicyName=name)
for attached in iam.list_attached_user_policies(UserName=user)["AttachedPolicies"]:
    iam.detach_user_policy(UserName=user, PolicyArn=attached["PolicyArn"])
for key in iam.list_access_keys(UserName=user)["AccessKeyMetadata"]:
    iam.delete_access_key(UserName=user, AccessKeyId=key["AccessKeyId"])
key = iam.create_access_key(UserName=user)["AccessKey"]
print(key["AccessKeyId"], key["SecretAccessKey"])
EOF
)"
read -r op_key_id op_secret <<<"$op_creds"
unset op_creds
log "operator access key id: $op_key_id"

mkdir -p .local
pidfile=.local/operator.pid
oplog=.local/operator.log
if [[ -f $pidfile ]]; then
  old="$(cat "$pidfile")"
  if kill -0 "$old" 2>/dev/null && ps -p "$old" -o args= | grep -q s3-operator; then
    log "stopping the operator of a previous run (pid $old)"
    kill "$old"
    for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$old" 2>/dev/null || true
  fi
  rm -f "$pidfile"
fi

log "starting the operator (log: $oplog)"
# The operator reaches the API server through the admin KUBECONFIG of the env file, so locally it
# runs with cluster-admin rights; the e2e tests run it under its ServiceAccount and
# config/rbac/role.yaml instead. AWS access uses only the s3-operator user created above.
# setsid detaches it from this terminal so it keeps running after the script ends.
env -u AWS_SESSION_TOKEN -u AWS_PROFILE \
  AWS_ACCESS_KEY_ID="$op_key_id" AWS_SECRET_ACCESS_KEY="$op_secret" AWS_REGION="$S3OP_AWS_REGION" \
  setsid "$operator_bin" run \
  --aws-endpoint-url "$S3OP_AWS_ENDPOINT" \
  --metrics-bind-address 127.0.0.1:8080 \
  --health-probe-bind-address 127.0.0.1:8081 \
  --resync-period 30s \
  >"$oplog" 2>&1 </dev/null &
pid=$!
unset op_secret
echo "$pid" >"$pidfile"

ready=0
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
  if ! kill -0 "$pid" 2>/dev/null; then
    tail -n 40 "$oplog" >&2 || true
    die "the operator exited; see $oplog"
  fi
  if curl -sf --max-time 2 -o /dev/null http://127.0.0.1:8081/readyz; then ready=1; break; fi
  sleep 0.2
done
if [[ $ready != 1 ]]; then
  tail -n 40 "$oplog" >&2 || true
  die "the operator did not become ready in 60s; see $oplog (pid $pid still running)"
fi
log "operator ready (pid $pid)"

log "applying config/samples/"
kubectl apply -k config/samples
if ! kubectl wait --for=condition=Ready bucket/photos bucketaccess/photos-app --timeout=60s; then
  kubectl get buckets,bucketaccesses -o wide >&2 || true
  tail -n 40 "$oplog" >&2 || true
  die "the samples did not become Ready; see $oplog"
fi
kubectl get buckets,bucketaccesses

log "using Secret photos-credentials (and only it) to write and read hello.txt"
kubectl get secret photos-credentials -o json | "$py" -c '
import base64, json, os, sys

import boto3
from botocore.config import Config

data = {k: base64.b64decode(v).decode() for k, v in json.load(sys.stdin)["data"].items()}
bucket, key_id = data["BUCKET_NAME"], data["AWS_ACCESS_KEY_ID"]
print(f"bucket {bucket}, access key id {key_id}", file=sys.stderr)
s3 = boto3.client(
    "s3",
    endpoint_url=data.get("AWS_ENDPOINT_URL_S3") or os.environ["S3OP_AWS_ENDPOINT"],
    region_name=data["AWS_REGION"],
    aws_access_key_id=key_id,
    aws_secret_access_key=data["AWS_SECRET_ACCESS_KEY"],
    config=Config(s3={"addressing_style": "path"}),
)
s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hello from s3-operator\n")
body = s3.get_object(Bucket=bucket, Key="hello.txt")["Body"].read().decode()
print(f"s3://{bucket}/hello.txt: {body}", end="")
'

cat <<EOF

The operator is running (pid $pid, recorded in $root/$pidfile) against the local
control plane and moto. Its log is $root/$oplog.
  source $envfile                 # kubectl and the endpoints of this environment
  kubectl get buckets,bucketaccesses
  curl -s http://127.0.0.1:8080/metrics
  tail -f $root/$oplog
To stop everything:
  kill $pid && $root/hack/env.sh down
EOF
