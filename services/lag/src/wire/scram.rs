//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the client side of
//! the exchange Kafka's SaslAuthenticate carries: no channel binding, the
//! server's signature checked at the end (a broker that does not know the
//! password cannot pass as one that does).

use openssl::base64;
use openssl::hash::{Hasher, MessageDigest};
use openssl::pkey::PKey;
use openssl::sign::Signer;

use super::security::Mechanism;

/// A failed exchange.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("the broker's SCRAM message is malformed: {0}")]
    Malformed(String),
    #[error("the broker's nonce does not extend ours")]
    Nonce,
    #[error("the broker's signature is wrong (it does not know the password)")]
    Signature,
    #[error("the broker refused: {0}")]
    Refused(String),
    #[error("crypto: {0}")]
    Crypto(String),
}

fn crypto(e: openssl::error::ErrorStack) -> ScramError {
    ScramError::Crypto(e.to_string())
}

/// One exchange, between the client's first and last message.
pub struct Scram {
    digest: MessageDigest,
    password: String,
    client_first_bare: String,
    nonce: String,
    server_signature: Vec<u8>,
}

impl std::fmt::Debug for Scram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scram").field("client_first_bare", &self.client_first_bare).finish_non_exhaustive()
    }
}

fn hmac(digest: MessageDigest, key: &[u8], data: &[u8]) -> Result<Vec<u8>, ScramError> {
    let key = PKey::hmac(key).map_err(crypto)?;
    let mut signer = Signer::new(digest, &key).map_err(crypto)?;
    signer.update(data).map_err(crypto)?;
    signer.sign_to_vec().map_err(crypto)
}

fn hash(digest: MessageDigest, data: &[u8]) -> Result<Vec<u8>, ScramError> {
    let mut h = Hasher::new(digest).map_err(crypto)?;
    h.update(data).map_err(crypto)?;
    Ok(h.finish().map_err(crypto)?.to_vec())
}

/// `name=value` attributes of a SCRAM message.
fn attribute(message: &str, name: char) -> Result<&str, ScramError> {
    message
        .split(',')
        .find_map(|part| part.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        .ok_or_else(|| ScramError::Malformed(format!("no {name}= in {message:?}")))
}

impl Scram {
    /// Starts an exchange; the client's first message. `nonce`: printable,
    /// without commas (random in production).
    pub fn start(mechanism: Mechanism, username: &str, password: &str, nonce: &str) -> (Self, String) {
        let digest =
            if mechanism == Mechanism::ScramSha512 { MessageDigest::sha512() } else { MessageDigest::sha256() };
        let name = username.replace('=', "=3D").replace(',', "=2C");
        let client_first_bare = format!("n={name},r={nonce}");
        let first = format!("n,,{client_first_bare}");
        let scram = Self {
            digest,
            password: password.into(),
            client_first_bare,
            nonce: nonce.into(),
            server_signature: Vec::new(),
        };
        (scram, first)
    }

    /// A fresh random nonce.
    pub fn nonce() -> Result<String, ScramError> {
        let mut bytes = [0u8; 24];
        openssl::rand::rand_bytes(&mut bytes).map_err(crypto)?;
        Ok(base64::encode_block(&bytes))
    }

    /// The client's final message, for the server's first.
    pub fn respond(&mut self, server_first: &str) -> Result<String, ScramError> {
        if let Ok(error) = attribute(server_first, 'e') {
            return Err(ScramError::Refused(error.into()));
        }
        let nonce = attribute(server_first, 'r')?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let salt = base64::decode_block(attribute(server_first, 's')?).map_err(crypto)?;
        let iterations: usize =
            attribute(server_first, 'i')?.parse().map_err(|_| ScramError::Malformed("i= is not a number".into()))?;
        let mut salted = vec![0u8; self.digest.size()];
        openssl::pkcs5::pbkdf2_hmac(self.password.as_bytes(), &salt, iterations, self.digest, &mut salted)
            .map_err(crypto)?;
        let client_key = hmac(self.digest, &salted, b"Client Key")?;
        let stored_key = hash(self.digest, &client_key)?;
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac(self.digest, &stored_key, auth_message.as_bytes())?;
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        let server_key = hmac(self.digest, &salted, b"Server Key")?;
        self.server_signature = hmac(self.digest, &server_key, auth_message.as_bytes())?;
        Ok(format!("{without_proof},p={}", base64::encode_block(&proof)))
    }

    /// Checks the server's final message.
    pub fn verify(&self, server_final: &str) -> Result<(), ScramError> {
        if let Ok(error) = attribute(server_final, 'e') {
            return Err(ScramError::Refused(error.into()));
        }
        let given = base64::decode_block(attribute(server_final, 'v')?).map_err(crypto)?;
        // openssl's constant-time compare asserts equal lengths.
        let same = given.len() == self.server_signature.len() && openssl::memcmp::eq(&given, &self.server_signature);
        if same { Ok(()) } else { Err(ScramError::Signature) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677, section 3: the SCRAM-SHA-256 example exchange.
    #[test]
    fn the_rfc_7677_example() {
        let (mut scram, first) = Scram::start(Mechanism::ScramSha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(first, "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = scram.respond(server_first).expect("respond");
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        scram.verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").expect("the server knows the password");
        assert_eq!(scram.verify("v=AAAA"), Err(ScramError::Signature));
    }

    #[test]
    fn a_server_that_does_not_extend_the_nonce_or_refuses_is_rejected() {
        let (mut scram, _) = Scram::start(Mechanism::ScramSha512, "a,b=c", "p", "abc");
        assert_eq!(scram.respond("r=xyz,s=AAAA,i=4096"), Err(ScramError::Nonce));
        assert_eq!(scram.respond("e=invalid-proof"), Err(ScramError::Refused("invalid-proof".into())));
        let (_, first) = Scram::start(Mechanism::ScramSha512, "a,b=c", "p", "abc");
        assert_eq!(first, "n,,n=a=2Cb=3Dc,r=abc", "the name is escaped");
    }
}
