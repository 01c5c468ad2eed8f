COMMENT ON TABLE topups IS
    'A top-up order: one Stripe Checkout Session buying credits for one account. '
    'It moves from pending to paid at most once, by a conditional UPDATE ... WHERE status = ''pending''; '
    'the credit is posted only in the transaction whose UPDATE made that transition.';
