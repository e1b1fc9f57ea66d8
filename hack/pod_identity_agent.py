"""A stand-in for the EKS Pod Identity agent, for the test environment.

It serves the container credentials endpoint the way the agent's DaemonSet does on EKS:
`GET /v1/credentials` with the Pod's ServiceAccount token (audience pods.eks.amazonaws.com, the
file EKS's webhook names in AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE) as the whole `Authorization`
header. It hands the token to EKS Auth AssumeRoleForPodIdentity (the emulator's), signed with
its own identity, and answers what the SDKs' container credentials provider reads: AccessKeyId,
SecretAccessKey, Token, AccountId and Expiration (RFC 3339). A refusal keeps EKS Auth's HTTP
status and names its error code; the token never reaches a log.

Pods point AWS_CONTAINER_CREDENTIALS_FULL_URI at http://169.254.170.23/v1/credentials (an
address the SDKs accept over plain HTTP, as they accept loopback ones).

Usage: python pod_identity_agent.py ENDPOINT CLUSTER HOST:PORT [HOST:PORT...]
  (moto venv's python; the agent's key in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
from botocore.exceptions import BotoCoreError, ClientError

CREDENTIALS_PATH = "/v1/credentials"


def credentials_for(client, cluster, token):
    """(HTTP status, JSON answer) for one Pod's token."""
    try:
        answer = client.assume_role_for_pod_identity(clusterName=cluster, token=token)
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)
        error = e.response.get("Error", {})
        return status, {"code": error.get("Code"), "message": error.get("Message")}
    except (BotoCoreError, ValueError) as e:
        return 500, {"code": "InternalError", "message": str(e)}
    creds = answer["credentials"]
    return 200, {
        "AccessKeyId": creds["accessKeyId"],
        "SecretAccessKey": creds["secretAccessKey"],
        "Token": creds["sessionToken"],
        "AccountId": answer["assumedRoleUser"]["arn"].split(":")[4],
        "Expiration": creds["expiration"].strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def handler_for(client, cluster):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?", 1)[0] != CREDENTIALS_PATH:
                return self.answer(404, {"message": f"only {CREDENTIALS_PATH} is served"})
            token = self.headers.get("Authorization", "").strip()
            if not token:
                return self.answer(400, {"message": "the Authorization header holds no token"})
            self.answer(*credentials_for(client, cluster, token))

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):  # method, path and status only: never the token
            sys.stderr.write(f"{self.address_string()} {fmt % args}\n")

    return Handler


def main():
    endpoint, cluster, listens = sys.argv[1], sys.argv[2], sys.argv[3:]
    client = boto3.client("eks-auth", endpoint_url=endpoint, region_name="us-east-1")
    servers = []
    for listen in listens:
        host, port = listen.rsplit(":", 1)
        servers.append(ThreadingHTTPServer((host, int(port)), handler_for(client, cluster)))
        print(f"serving http://{listen}{CREDENTIALS_PATH} for cluster {cluster}", flush=True)
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
