-- name: iam_policy_changes
-- purpose: Changes to IAM policies: inline, managed, attachments
-- cis: 4.4
-- parameters: :start, :end (ISO 8601 times; start inclusive, end exclusive)
--
-- Athena (Trino) SQL. Day partitions run from the start's date to the day after the range's last second: the date in
-- an object key is the delivery date, which can be the day after the event. Rows are deduplicated on eventid and
-- ordered by time.
WITH matching AS (
  SELECT
    *,
    row_number() OVER (PARTITION BY eventid ORDER BY eventtime) AS occurrence
  FROM cloudtrail_logs
  WHERE day BETWEEN date_format(from_iso8601_timestamp(:start), '%Y/%m/%d')
                AND date_format(from_iso8601_timestamp(:end) - INTERVAL '1' SECOND + INTERVAL '1' DAY, '%Y/%m/%d')
    AND from_iso8601_timestamp(eventtime) >= from_iso8601_timestamp(:start)
    AND from_iso8601_timestamp(eventtime) < from_iso8601_timestamp(:end)
    AND (eventsource = 'iam.amazonaws.com'
    AND eventname IN (
        'DeleteGroupPolicy',
        'DeleteRolePolicy',
        'DeleteUserPolicy',
        'PutGroupPolicy',
        'PutRolePolicy',
        'PutUserPolicy',
        'CreatePolicy',
        'DeletePolicy',
        'CreatePolicyVersion',
        'DeletePolicyVersion',
        'SetDefaultPolicyVersion',
        'AttachRolePolicy',
        'DetachRolePolicy',
        'AttachUserPolicy',
        'DetachUserPolicy',
        'AttachGroupPolicy',
        'DetachGroupPolicy'))
)
SELECT
  eventtime,
  eventid,
  recipientaccountid AS account,
  awsregion AS region,
  coalesce(useridentity.arn, useridentity.principalid, useridentity.type) AS actor,
  useridentity.type AS identity_type,
  sourceipaddress,
  eventsource,
  eventname,
  coalesce(json_extract_scalar(requestparameters, '$.policyArn'), json_extract_scalar(requestparameters, '$.policyName')) AS policy,
  coalesce(json_extract_scalar(requestparameters, '$.roleName'), json_extract_scalar(requestparameters, '$.userName'), json_extract_scalar(requestparameters, '$.groupName')) AS principal,
  errorcode,
  errormessage
FROM matching
WHERE occurrence = 1
ORDER BY eventtime, eventid
