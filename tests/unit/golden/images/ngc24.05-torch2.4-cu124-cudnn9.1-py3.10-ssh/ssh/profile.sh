# /etc/profile.d/torchimages.sh: login shells (which reset PATH in /etc/profile) get the
# container's environment back, as start-sshd recorded it.
if [ -r "${HOME}/.sshd/environment.sh" ]; then
    . "${HOME}/.sshd/environment.sh"
fi
