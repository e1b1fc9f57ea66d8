#!/usr/bin/env bash
# Runs the operator the way users run it, on this machine: a one-node Kubernetes cluster (etcd,
# kube-apiserver, kubelet, containerd ...) and moto as AWS, the operator image built from the
# project's Dockerfile and installed with `helm install`, the samples, and an application Pod that
# writes to its bucket through the BucketAccess's Secret (envFrom, the AWS SDK's default chain).
# Everything stays up afterwards; the end of the output says how to use and stop it. Root only.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source hack/lib.sh
[[ $(id -u) -eq 0 ]] || die "hack/run-local.sh needs root: its one-node cluster runs containerd, kubelet and kube-proxy (run it with sudo)"

state="$root/.local/env"
ns=s3-operator-system
team="team-a"

log "[1/9] building or reusing the tools (Kubernetes, etcd, moto, helm, the node's packages)"
hack/tools.sh etcd kube moto helm node_pkgs kube_node coredns

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$S3OP_CACHE/target}"
log "[2/9] building the operator ($RELEASE_BUILD) and the example application"
$RELEASE_BUILD
cargo build --locked --example bucket-app

log "[3/9] starting the local cluster and moto in $state (kept running)"
envfile="$(hack/env.sh up --node --state "$state" | tail -n 1)"
# shellcheck source=/dev/null
source "$envfile"
py="$S3OP_CACHE/venv-moto-$MOTO_VERSION/bin/python"

log "[4/9] building the images (./Dockerfile on a local base image; the application) and loading them into the node"
version=$(crate_version)
read -r op_image op_archive < <(hack/images/build.sh operator "$version" | tail -n 1)
read -r app_image app_archive < <(hack/images/build.sh app | tail -n 1)
hack/node.sh load "$op_archive" "$app_archive" --state "$state"

log "[5/9] the drift-event queue and its EventBridge rule, the permissions boundary and the operator's IAM user in moto"
# Drift found by events, set up as the README's "Drift found by events" says: out-of-band changes
# are put back within seconds instead of at the resync. The rule, the queue policy and the
# operator's policy (the shipped one plus reading that one queue) are what `s3-operator
# iam-policy` renders.
operator_bin="$CARGO_TARGET_DIR/release/s3-operator"
queue_name=s3op-drift-default
queue_arn="arn:aws:sqs:$S3OP_AWS_REGION:123456789012:$queue_name"
"$operator_bin" iam-policy --account-id 123456789012 --cluster-name default --drift-events-queue-arn "$queue_arn" >"$state/operator-policy.json"
"$operator_bin" iam-policy --account-id 123456789012 --cluster-name default --drift-events-queue-arn "$queue_arn" --drift-events-rule >"$state/drift-rule.json"
queue_url="$("$py" - "$S3OP_AWS_ENDPOINT" "$S3OP_AWS_REGION" "$queue_name" "$queue_arn" "$state/drift-rule.json" <<'EOF'
import json, os, sys

import boto3

endpoint, region, name, arn, rule_file = sys.argv[1:6]
admin = dict(
    endpoint_url=endpoint,
    region_name=region,
    aws_access_key_id=os.environ["S3OP_AWS_ADMIN_ACCESS_KEY_ID"],
    aws_secret_access_key=os.environ["S3OP_AWS_ADMIN_SECRET_ACCESS_KEY"],
)
with open(rule_file) as f:
    rule = json.load(f)
sqs = boto3.client("sqs", **admin)
url = sqs.create_queue(QueueName=name)["QueueUrl"]
sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(rule["queuePolicy"])})
events = boto3.client("events", **admin)
events.put_rule(Name=rule["ruleName"], EventPattern=json.dumps(rule["eventPattern"]))
events.put_targets(Rule=rule["ruleName"], Targets=[{"Id": "drift-queue", "Arn": arn}])
print(url)
EOF
)"
log "drift-event queue: $queue_url"
# Prints "ACCESS_KEY_ID SECRET"; captured, never shown.
op_creds="$("$py" - "$S3OP_AWS_ENDPOINT" "$S3OP_AWS_REGION" "$state/operator-policy.json" config/iam/boundary-policy.json <<'EOF'
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
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# The key pair goes in through stdin, never on a command line.
printf 'AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' "$op_key_id" "$op_secret" |
  kubectl create secret generic s3-operator-aws -n "$ns" --from-env-file=/dev/stdin \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
unset op_secret

log "[6/9] helm install of charts/s3-operator ($op_image, 2 replicas) into $ns"
values="$state/helm-values.yaml"
cat >"$values" <<EOF
image: {repository: "${op_image%:*}", tag: "${op_image##*:}", pullPolicy: Never}
replicaCount: 2
clusterName: default
# moto as Pods reach it: the node's bridge address, relayed to moto on loopback.
aws: {endpointUrl: "$S3OP_NODE_AWS_ENDPOINT", region: "$S3OP_AWS_REGION"}
driftEvents: {queueUrl: "$queue_url"}
extraEnv:
  - {name: AWS_ACCESS_KEY_ID, valueFrom: {secretKeyRef: {name: s3-operator-aws, key: AWS_ACCESS_KEY_ID}}}
  - {name: AWS_SECRET_ACCESS_KEY, valueFrom: {secretKeyRef: {name: s3-operator-aws, key: AWS_SECRET_ACCESS_KEY}}}
EOF
if ! helm upgrade --install s3-operator charts/s3-operator -n "$ns" -f "$values" --wait --timeout 5m; then
  kubectl get pods -n "$ns" -o wide >&2 || true
  kubectl get events -n "$ns" --sort-by=.lastTimestamp >&2 || true
  kubectl logs -n "$ns" -l app.kubernetes.io/name=s3-operator --tail 40 --all-containers >&2 || true
  die "the operator did not come up"
fi
kubectl get pods -n "$ns" -o wide
log "leader: $(kubectl get lease s3-operator-leader -n "$ns" -o jsonpath='{.spec.holderIdentity}')"

log "[7/9] applying config/samples/ to namespace $team"
kubectl create namespace "$team" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -k config/samples -n "$team"
if ! kubectl wait -n "$team" --for=condition=Ready bucket/photos bucketaccess/photos-app --timeout=120s; then
  kubectl get buckets,bucketaccesses -n "$team" -o wide >&2 || true
  kubectl logs -n "$ns" -l app.kubernetes.io/name=s3-operator --tail 40 >&2 || true
  die "the samples did not become Ready"
fi
kubectl get buckets,bucketaccesses -n "$team"

log "[8/9] running the application Pod: envFrom Secret photos-credentials, writes and reads an object"
kubectl delete pod photos-app -n "$team" --ignore-not-found --wait >/dev/null
kubectl apply -n "$team" -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: photos-app}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: app
      image: $app_image
      imagePullPolicy: Never
      envFrom: [{secretRef: {name: photos-credentials}}]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
EOF
if ! kubectl wait -n "$team" --for=jsonpath='{.status.phase}'=Succeeded pod/photos-app --timeout=120s; then
  kubectl describe pod photos-app -n "$team" >&2 || true
  kubectl logs photos-app -n "$team" >&2 || true
  die "the application Pod did not succeed"
fi
kubectl logs photos-app -n "$team"

log "[9/9] drift: removing the bucket's public access block behind the operator's back"
bucket="$(kubectl get bucket photos -n "$team" -o jsonpath='{.status.bucketName}')"
# Prints the seconds until the operator put it back, found by its CloudTrail event.
if ! took="$("$py" - "$S3OP_AWS_ENDPOINT" "$S3OP_AWS_REGION" "$bucket" <<'EOF'
import os, sys, time

import boto3

endpoint, region, bucket = sys.argv[1:4]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    region_name=region,
    aws_access_key_id=os.environ["S3OP_AWS_ADMIN_ACCESS_KEY_ID"],
    aws_secret_access_key=os.environ["S3OP_AWS_ADMIN_SECRET_ACCESS_KEY"],
)
s3.delete_public_access_block(Bucket=bucket)
start = time.monotonic()
while time.monotonic() - start < 60:
    try:
        s3.get_public_access_block(Bucket=bucket)
        print(f"{time.monotonic() - start:.1f}")
        sys.exit(0)
    except s3.exceptions.ClientError:
        time.sleep(0.2)
sys.exit(1)
EOF
)"; then
  kubectl logs -n "$ns" -l app.kubernetes.io/name=s3-operator --tail 40 >&2 || true
  die "the public access block was not put back within 60s"
fi
log "the operator put the public access block back after ${took}s (drift event):"
kubectl get events -n "$team" --field-selector involvedObject.kind=Bucket,reason=DriftCorrected

cat <<EOF

The operator runs as two Pods (Helm release s3-operator in $ns) on the local one-node
cluster, against moto. The sample Bucket and BucketAccess are Ready in $team, the Pod
photos-app wrote to the bucket with the Secret's credentials, and drift found by its CloudTrail
event was put back in ${took}s.
  source $envfile        # kubectl and the endpoints of this environment
  kubectl get buckets,bucketaccesses -A
  kubectl logs -n $ns -l app.kubernetes.io/name=s3-operator -f
To stop everything and restore the host:
  $root/hack/env.sh down --state $state
EOF
