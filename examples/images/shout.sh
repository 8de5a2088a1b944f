#!/bin/sh
# A classic-watchdog function (fprocess): the request body on stdin, the request in Http_* variables.
tr a-z A-Z
echo
echo "method=$Http_Method path=$Http_Path query=$Http_Query header=$Http_X_Test_Header"
