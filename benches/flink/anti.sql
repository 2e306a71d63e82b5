-- The bids of auctions that never had a bid over 9,000,000 (an anti join, retracting).
CREATE TABLE anti_sink (auction BIGINT, bidder BIGINT, price BIGINT) WITH (${SINK});
INSERT INTO anti_sink
SELECT auction, bidder, price FROM bid b
WHERE NOT EXISTS (SELECT 1 FROM bid b2 WHERE b2.auction = b.auction AND b2.price > 9000000);
