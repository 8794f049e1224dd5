# Test fixture: on a moto server started with INITIAL_NO_AUTH_ACTION_COUNT=4 (so it checks signatures and
# access keys after these four calls), make an IAM user allowed everything, its access key and the bucket
# kiln-backups; print the key as an AWS shared-credentials file. Usage: python3 - ENDPOINT < this file
import sys

import boto3

ep = sys.argv[1]
iam = boto3.client("iam", endpoint_url=ep, region_name="us-east-1",
                   aws_access_key_id="setup", aws_secret_access_key="setup")
iam.create_user(UserName="kiln")
iam.put_user_policy(UserName="kiln", PolicyName="all", PolicyDocument=(
    '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'))
key = iam.create_access_key(UserName="kiln")["AccessKey"]
s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
s3.create_bucket(Bucket="kiln-backups")
print("[default]")
print("aws_access_key_id = " + key["AccessKeyId"])
print("aws_secret_access_key = " + key["SecretAccessKey"])
