"""Which S3 policy action each request needs, and the AccessDenied it gets when refused.

The front end (``s3/frontend.py``) asks ``action_for`` once per request, after the signature
is checked, and refuses the request unless its principal's ``authorize(action, bucket, key)``
(``s3/sigv4.py``) says yes. The policy engine itself lives above this layer
(``auth/policy.py``); this module only names the actions and resources, as S3 does:

=========================================  ================================  ========================
request                                    action                            resource
=========================================  ================================  ========================
GET / (ListBuckets)                        s3:ListAllMyBuckets               arn:aws:s3:::*
GET /b (ListObjects v1/v2), HEAD /b        s3:ListBucket                     arn:aws:s3:::b
GET /b?location                            s3:GetBucketLocation              arn:aws:s3:::b
GET /b?uploads                             s3:ListBucketMultipartUploads     arn:aws:s3:::b
GET /b?versions (ListObjectVersions)       s3:ListBucketVersions             arn:aws:s3:::b
GET /b?versioning                          s3:GetBucketVersioning            arn:aws:s3:::b
PUT /b?versioning                          s3:PutBucketVersioning            arn:aws:s3:::b
GET /b?policy                              s3:GetBucketPolicy                arn:aws:s3:::b
PUT /b?policy                              s3:PutBucketPolicy                arn:aws:s3:::b
DELETE /b?policy                           s3:DeleteBucketPolicy             arn:aws:s3:::b
GET /b?policyStatus                        s3:GetBucketPolicyStatus          arn:aws:s3:::b
PUT /b                                     s3:CreateBucket                   arn:aws:s3:::b
DELETE /b                                  s3:DeleteBucket                   arn:aws:s3:::b
POST /b?delete (DeleteObjects)             s3:DeleteObject, for each key     arn:aws:s3:::b/key
GET, HEAD /b/k; POST /b/k?select           s3:GetObject                      arn:aws:s3:::b/k
GET, HEAD /b/k?versionId=                  s3:GetObjectVersion               arn:aws:s3:::b/k
GET /b/k?attributes                        s3:GetObjectAttributes            arn:aws:s3:::b/k
GET /b/k?attributes&versionId=             s3:GetObjectVersionAttributes     arn:aws:s3:::b/k
GET /b/k?uploadId (ListParts)              s3:ListMultipartUploadParts       arn:aws:s3:::b/k
PUT /b/k (also CopyObject's destination,   s3:PutObject                      arn:aws:s3:::b/k
UploadPart), POST /b/k?uploads|?uploadId
DELETE /b/k                                s3:DeleteObject                   arn:aws:s3:::b/k
DELETE /b/k?versionId=                     s3:DeleteObjectVersion            arn:aws:s3:::b/k
DELETE /b/k?uploadId                       s3:AbortMultipartUpload           arn:aws:s3:::b/k
=========================================  ================================  ========================

CopyObject / UploadPartCopy also need s3:GetObject on the source (s3:GetObjectVersion when it
names a versionId): call :func:`require` with the source's bucket and key (``copy_source_check``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nearfaas.s3.errors import S3Error

if TYPE_CHECKING:
    from nearfaas.s3.sigv4 import Principal

LIST_ALL_MY_BUCKETS = "s3:ListAllMyBuckets"
LIST_BUCKET = "s3:ListBucket"
GET_BUCKET_LOCATION = "s3:GetBucketLocation"
LIST_BUCKET_MULTIPART_UPLOADS = "s3:ListBucketMultipartUploads"
CREATE_BUCKET = "s3:CreateBucket"
DELETE_BUCKET = "s3:DeleteBucket"
GET_OBJECT = "s3:GetObject"
GET_OBJECT_ATTRIBUTES = "s3:GetObjectAttributes"
GET_OBJECT_VERSION_ATTRIBUTES = "s3:GetObjectVersionAttributes"  # a named version's, as AWS names it
LIST_MULTIPART_UPLOAD_PARTS = "s3:ListMultipartUploadParts"
PUT_OBJECT = "s3:PutObject"
DELETE_OBJECT = "s3:DeleteObject"
ABORT_MULTIPART_UPLOAD = "s3:AbortMultipartUpload"
LIST_BUCKET_VERSIONS = "s3:ListBucketVersions"
GET_BUCKET_VERSIONING = "s3:GetBucketVersioning"
PUT_BUCKET_VERSIONING = "s3:PutBucketVersioning"
GET_OBJECT_VERSION = "s3:GetObjectVersion"
DELETE_OBJECT_VERSION = "s3:DeleteObjectVersion"
GET_BUCKET_POLICY = "s3:GetBucketPolicy"
PUT_BUCKET_POLICY = "s3:PutBucketPolicy"
DELETE_BUCKET_POLICY = "s3:DeleteBucketPolicy"
GET_BUCKET_POLICY_STATUS = "s3:GetBucketPolicyStatus"

ACTIONS = frozenset({
    LIST_ALL_MY_BUCKETS, LIST_BUCKET, GET_BUCKET_LOCATION, LIST_BUCKET_MULTIPART_UPLOADS, CREATE_BUCKET, DELETE_BUCKET,
    GET_OBJECT, GET_OBJECT_ATTRIBUTES, GET_OBJECT_VERSION_ATTRIBUTES, LIST_MULTIPART_UPLOAD_PARTS, PUT_OBJECT, DELETE_OBJECT, ABORT_MULTIPART_UPLOAD,
    LIST_BUCKET_VERSIONS, GET_BUCKET_VERSIONING, PUT_BUCKET_VERSIONING, GET_OBJECT_VERSION, DELETE_OBJECT_VERSION,
    GET_BUCKET_POLICY, PUT_BUCKET_POLICY, DELETE_BUCKET_POLICY, GET_BUCKET_POLICY_STATUS,
})


def resource_arn(bucket: str | None, key: str | None = None) -> str:
    """The ARN a policy's Resource is matched against."""
    if bucket is None:
        return "arn:aws:s3:::*"
    return f"arn:aws:s3:::{bucket}/{key}" if key else f"arn:aws:s3:::{bucket}"


def action_for(method: str, bucket: str | None, key: str, q: dict) -> str | None:
    """The action a request needs; None where it is checked elsewhere (DeleteObjects: each key)
    or the request is refused anyway (a method S3 has no operation for)."""
    if bucket is None:
        return LIST_ALL_MY_BUCKETS if method in ("GET", "HEAD") else None
    if not key:
        if "policyStatus" in q:
            return GET_BUCKET_POLICY_STATUS if method == "GET" else None
        if "policy" in q:
            return {"GET": GET_BUCKET_POLICY, "PUT": PUT_BUCKET_POLICY, "DELETE": DELETE_BUCKET_POLICY}.get(method)
        if method == "GET":
            if "location" in q:
                return GET_BUCKET_LOCATION
            if "uploads" in q:
                return LIST_BUCKET_MULTIPART_UPLOADS
            if "versions" in q:
                return LIST_BUCKET_VERSIONS
            if "versioning" in q:
                return GET_BUCKET_VERSIONING
            return LIST_BUCKET
        if method == "PUT" and "versioning" in q:
            return PUT_BUCKET_VERSIONING
        return {"HEAD": LIST_BUCKET, "PUT": CREATE_BUCKET, "DELETE": DELETE_BUCKET}.get(method)
    if method in ("GET", "HEAD"):
        if "uploadId" in q:
            return LIST_MULTIPART_UPLOAD_PARTS
        if "attributes" in q:
            return GET_OBJECT_VERSION_ATTRIBUTES if "versionId" in q else GET_OBJECT_ATTRIBUTES
        return GET_OBJECT_VERSION if "versionId" in q else GET_OBJECT
    if method == "PUT":
        return PUT_OBJECT
    if method == "DELETE":
        if "uploadId" in q:
            return ABORT_MULTIPART_UPLOAD
        return DELETE_OBJECT_VERSION if "versionId" in q else DELETE_OBJECT
    if method == "POST":
        if "select" in q:
            return GET_OBJECT
        if "uploads" in q or "uploadId" in q:
            return PUT_OBJECT
    return None


def denied(principal: Principal, action: str, bucket: str | None, key: str | None = None) -> S3Error:
    resource = resource_arn(bucket, key)
    path = "/" if bucket is None else f"/{bucket}/{key}" if key else f"/{bucket}"
    return S3Error("AccessDenied", f"Access Denied: {principal.name} is not allowed to perform {action} on {resource}.",
                   resource=path)


def require(principal: Principal | None, action: str, bucket: str | None, key: str | None = None) -> None:
    """Raise AccessDenied unless ``principal`` may do ``action`` on bucket/key. None (auth off, or
    an anonymous request the front end let through) may do anything."""
    if principal is not None and not principal.authorize(action, bucket, key):
        raise denied(principal, action, bucket, key)


def copy_source_check(principal: Principal | None, source_bucket: str, source_key: str, version_id: str | None = None) -> None:
    """CopyObject / UploadPartCopy: the source must be readable by the same key (s3:GetObject, or
    s3:GetObjectVersion for a named version); the destination's s3:PutObject is checked with the
    request itself."""
    require(principal, GET_OBJECT if version_id is None else GET_OBJECT_VERSION, source_bucket, source_key)
