-- name: gpu_instance_launches
-- purpose: RunInstances of GPU families (p, g, trn, inf, dl), failed calls included: who, where, what, how many
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
    AND (eventsource = 'ec2.amazonaws.com'
    AND eventname = 'RunInstances'
    AND regexp_like(
      coalesce(json_extract_scalar(requestparameters, '$.instanceType'),
               json_extract_scalar(responseelements, '$.instancesSet.items[0].instanceType'), ''),
      '^(p|g|trn|inf|dl)[0-9]'))
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
  coalesce(json_extract_scalar(requestparameters, '$.instanceType'), json_extract_scalar(responseelements, '$.instancesSet.items[0].instanceType')) AS instance_type,
  CAST(json_extract_scalar(requestparameters, '$.instancesSet.items[0].minCount') AS INTEGER) AS min_count,
  CAST(json_extract_scalar(requestparameters, '$.instancesSet.items[0].maxCount') AS INTEGER) AS max_count,
  coalesce(json_array_length(json_extract(responseelements, '$.instancesSet.items')), 0) AS launched,
  json_extract_scalar(requestparameters, '$.launchTemplate.launchTemplateId') AS launch_template_id,
  errorcode,
  errormessage
FROM matching
WHERE occurrence = 1
ORDER BY eventtime, eventid
