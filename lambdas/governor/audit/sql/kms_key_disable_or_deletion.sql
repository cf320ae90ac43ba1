-- name: kms_key_disable_or_deletion
-- purpose: Customer managed KMS keys disabled or scheduled for deletion
-- cis: 4.7
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
    AND (eventsource = 'kms.amazonaws.com'
    AND eventname IN (
        'DisableKey',
        'ScheduleKeyDeletion'))
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
  json_extract_scalar(requestparameters, '$.keyId') AS key_id,
  json_extract_scalar(requestparameters, '$.pendingWindowInDays') AS pending_window_days,
  errorcode,
  errormessage
FROM matching
WHERE occurrence = 1
ORDER BY eventtime, eventid
