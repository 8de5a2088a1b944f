"""S3 errors: one exception type that carries the standard code, HTTP status and a message
that tells the user what to change. The front end renders it as the standard XML body."""

from __future__ import annotations

from xml.sax.saxutils import escape

# code -> (HTTP status, default message). Codes and statuses follow the S3 API reference.
ERRORS: dict[str, tuple[int, str]] = {
    "AccessDenied": (403, "Access Denied."),
    "BadDigest": (400, "The Content-MD5 you specified did not match what we received."),
    "BucketAlreadyOwnedByYou": (409, "Your previous request to create the named bucket succeeded and you already own it."),
    "BucketAlreadyExists": (409, "The requested bucket name is not available: another key owns it. Choose another name."),
    "NoSuchBucketPolicy": (404, "The bucket policy does not exist."),
    "MalformedPolicy": (400, "The policy is not valid."),
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty; delete its objects first."),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed object size."),
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed object size (5 MiB for every part but the last)."),
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the Content-Length HTTP header."),
    "RequestTimeout": (400, "Your socket connection to the server was not read from or written to within the timeout period."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidArgument": (400, "Invalid Argument."),
    "InvalidBucketName": (400, "The specified bucket is not valid: use 3-63 characters of a-z, 0-9, '.', '-', starting and ending with a letter or digit."),
    "InvalidDigest": (400, "The Content-MD5 you specified is not valid base64 of a 16-byte MD5 digest."),
    "InvalidObjectName": (400, "The object key is not allowed: keys may not contain NUL or control characters, nor '.' or '..' path segments."),
    "InvalidURI": (400, "Couldn't parse the specified URI."),
    "InvalidPart": (400, "One or more of the specified parts could not be found or its ETag does not match."),
    "InvalidPartOrder": (400, "The list of parts was not in ascending order by part number."),
    "InvalidRange": (416, "The requested range is not satisfiable."),
    "InvalidRequest": (400, "Invalid Request."),
    "KeyTooLongError": (400, "Your key is too long: the maximum is 1024 bytes of UTF-8."),
    "MalformedXML": (400, "The XML you provided was not well-formed or did not validate against our published schema."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "NoSuchBucket": (404, "The specified bucket does not exist."),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchVersion": (404, "The version ID specified in the request does not match an existing version."),
    "IllegalVersioningConfigurationException": (400, "The versioning configuration specified in the request is invalid."),
    "NoSuchUpload": (404, "The specified multipart upload does not exist; it may have been aborted or completed."),
    "NotImplemented": (501, "A header or operation you provided implies functionality that is not implemented."),
    "PreconditionFailed": (412, "At least one of the preconditions you specified did not hold."),
    "InsufficientStorage": (507, "A storage node holding this object is at its free-space floor: the write was refused, nothing was stored. Free space or add a node, then retry."),
    "SlowDown": (503, "Please reduce your request rate: the storage node is busy. Retry after the Retry-After seconds."),
    "ServiceUnavailable": (503, "Reduce your request rate or retry: a storage node holding this data is unavailable."),
    "SignatureDoesNotMatch": (403, "The request signature we calculated does not match the signature you provided. Check your key and signing method."),
    "InvalidAccessKeyId": (403, "The AWS access key Id you provided does not exist in our records."),
    "MetadataTooLarge": (400, "Your metadata headers exceed the maximum allowed metadata size (2 KiB)."),
    "RequestTimeTooSkewed": (403, "The difference between the request time and the server's time is too large (over 15 minutes)."),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed; sign with AWS4-HMAC-SHA256 and a Credential of <key>/<yyyymmdd>/<region>/s3/aws4_request."),
    "AuthorizationQueryParametersError": (400, "The presigned URL's X-Amz-* query parameters are malformed or incomplete."),
    "XAmzContentSHA256Mismatch": (400, "The provided 'x-amz-content-sha256' header does not match what was computed."),
}


class S3Error(Exception):
    def __init__(self, code: str, message: str | None = None, *, resource: str = "", status: int | None = None,
                 headers: dict[str, str] | None = None):
        default_status, default_message = ERRORS.get(code, (400, code))
        self.headers = dict(headers or {})  # sent with the error response (e.g. Retry-After)
        self.code = code
        self.status = status or default_status
        self.message = message or default_message
        self.resource = resource
        super().__init__(f"{code}: {self.message}")

    def to_xml(self, request_id: str = "") -> bytes:
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{escape(self.code)}</Code><Message>{escape(self.message)}</Message>"
            f"<Resource>{escape(self.resource)}</Resource><RequestId>{escape(request_id)}</RequestId></Error>"
        ).encode()
