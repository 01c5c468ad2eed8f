-- The webhook's first delivery of a paid Checkout Session whose order it has not seen records the order
-- already paid (TopupsPaySession), instead of inserting it pending and then paying it. The guarantee
-- is unchanged, and the table's comment says how both ways hold it.
COMMENT ON TABLE topups IS
    'A top-up order: one Stripe Checkout Session (or one recharge) buying credits for one account. '
    'It becomes paid at most once: from pending by a conditional UPDATE ... WHERE status = ''pending'', '
    'or, for a session the webhook learns of first, by an INSERT of the order already paid, which '
    'topups_session_id_key admits once per session. The credit is posted only in the transaction '
    'that made the order paid.';
