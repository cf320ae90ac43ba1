-- name: access_key_events
-- purpose: IAM access keys created, activated, deactivated or deleted
-- cis: none
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
        'CreateAccessKey',
        'UpdateAccessKey',
        'DeleteAccessKey'))
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
  coalesce(json_extract_scalar(requestparameters, '$.userName'), json_extract_scalar(responseelements, '$.accessKey.userName'), useridentity.username) AS user_name,
  coalesce(json_extract_scalar(requestparameters, '$.accessKeyId'), json_extract_scalar(responseelements, '$.accessKey.accessKeyId')) AS access_key_id,
  coalesce(json_extract_scalar(requestparameters, '$.status'), json_extract_scalar(responseelements, '$.accessKey.status')) AS status,
  errorcode,
  errormessage
FROM matching
WHERE occurrence = 1
ORDER BY eventtime, eventid
